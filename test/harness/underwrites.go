package harness

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/test/workload"
)

// (test/workload imports no harness package outside its own external
// tests, so the harness may import it.)

// Expect is what UnderWrites waits for before it returns and what Finish
// asserts.
type Expect struct {
	// Acked: UnderWrites returns once more than Acked writes are
	// acknowledged (0: the first one), within Within (default 30 s).
	Acked  int
	Within time.Duration
	// NoFailed: Finish fails the test if any write failed after its
	// attempts (give the writer Attempts enough to ride out what the test
	// does). Without it a failed write is allowed: it may or may not have
	// been applied, and nothing is asserted about it.
	NoFailed bool
}

// Writes is a writer started by UnderWrites: a *workload.Writer (its
// AckedAbove, RevAbove, Acked and MaxRev for the test's own waits) and
// the client it writes through.
type Writes struct {
	*workload.Writer
	Cli    *clientv3.Client
	expect Expect
}

// UnderWrites starts a writer through cli (a cluster already up: e.Client(),
// a Hosts' or a foreign cluster's client) and waits until more than
// expect.Acked writes are acknowledged. Finish stops it and checks what it
// wrote.
func UnderWrites(tb testing.TB, cli *clientv3.Client, opts workload.Options, expect Expect) *Writes {
	tb.Helper()
	if expect.Within == 0 {
		expect.Within = 30 * time.Second
	}
	w := &Writes{Writer: workload.Start(tb, cli, opts), Cli: cli, expect: expect}
	Eventually(tb, expect.Within, 50*time.Millisecond, "writes acknowledged under "+opts.Prefix+"/", w.AckedAbove(expect.Acked))
	return w
}

// UpUnderWrites starts a fresh cluster of n members of version (New, Up)
// and a writer through a client of every member (UnderWrites).
func UpUnderWrites(tb testing.TB, n int, version string, opts workload.Options, expect Expect) (*Env, *Writes) {
	tb.Helper()
	e := New(tb)
	e.Up(n, version)
	return e, UnderWrites(tb, e.Client(), opts, expect)
}

// Finish stops the writer, logs its record and fails tb unless a write was
// acknowledged, no write failed (with Expect.NoFailed) and every
// acknowledged write reads back through the writer's client. It returns
// the record for further checks.
func (w *Writes) Finish(tb testing.TB) *workload.Result {
	tb.Helper()
	r := w.Stop()
	tb.Logf("writer: %s", r)
	if w.expect.NoFailed && len(r.Failed) > 0 {
		tb.Errorf("%d writes failed, first: %+v", len(r.Failed), r.Failed[0])
	}
	if len(r.Acked) == 0 {
		tb.Error("no write was acknowledged")
	}
	workload.RequireKeys(tb, w.Cli, r)
	return r
}
