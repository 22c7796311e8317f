package upgrade_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// linClients is how many plain clientv3 clients the linearizability
// checker runs, each dialling every member.
const linClients = 4

// linRun takes one cluster through operations, each a subtest, with the
// linearizability checker's clients running before, during and after it.
// Each operation gets fresh keys (the model starts them absent), its
// history is checked with porcupine (a violation fails the subtest and
// keeps the visualization, see workload.RequireLinearizable), and the
// leadership changes and client errors it caused are measured; the table
// of every operation is logged at the end.
type linRun struct {
	t       *testing.T
	e       *harness.Env
	kvs     []clientv3.KV
	leaders *workload.LeaderWatch
	reports []workload.PhaseReport
}

func newLinRun(t *testing.T, e *harness.Env) *linRun {
	r := &linRun{t: t, e: e, leaders: workload.WatchLeaders(t, e.Client(), 100*time.Millisecond)}
	for range linClients {
		r.kvs = append(r.kvs, e.Client())
	}
	t.Cleanup(func() {
		if len(r.reports) > 0 {
			t.Logf("leadership changes and client errors by operation (%d clients):\n%s", linClients, workload.FormatReports(r.reports))
		}
	})
	return r
}

// op runs one operation as a subtest; it returns false when it failed
// (the operations after it build on it).
func (r *linRun) op(name string, do func(t *testing.T, e *harness.Env)) bool {
	return r.t.Run(name, func(t *testing.T) {
		e := r.e.For(t)
		c := workload.StartLinearizable(t, r.kvs, workload.LinOptions{Prefix: "lin/" + strings.ReplaceAll(name, " ", "-")})
		// The clients are at work before the operation starts and after it
		// ends: the history covers the whole change.
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to run", func() error {
			if n := c.Count(); n < 50 {
				return fmt.Errorf("%d operations returned", n)
			}
			return nil
		})
		m := r.leaders.Mark()
		start := time.Now()
		do(t, e)
		took := time.Since(start)
		after := c.Count()
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to go on after "+name, func() error {
			if n := c.Count(); n < after+50 {
				return fmt.Errorf("%d operations returned since", n-after)
			}
			return nil
		})
		res := c.Stop()
		changes, terms := r.leaders.Since(m)
		r.reports = append(r.reports, workload.PhaseReport{Name: name, Took: took, LeaderChanges: changes, TermDelta: terms, Result: res})
		workload.RequireLinearizable(t, name, res)
	})
}

// TestLinearizableUpgradeRollback: a porcupine linearizability check of
// plain clientv3 clients (puts, linearizable gets, compare-and-swaps over
// three keys) through a rolling upgrade of three members from the oldest
// test version to the next and `steward rollback`.
func TestLinearizableUpgradeRollback(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[0])
	r := newLinRun(t, e)
	if !r.op("upgrade "+vs[0]+" to "+vs[1], func(t *testing.T, e *harness.Env) {
		e.MustRun("upgrade", "apply", "--to", vs[1])
		harness.RequireVersion(t, e.WaitStatus(time.Minute, "every member on "+vs[1], harness.Healthy), vs[1], "after the upgrade")
	}) {
		return
	}
	r.op("rollback to "+vs[0], func(t *testing.T, e *harness.Env) {
		e.MustRun("rollback")
		harness.RequireVersion(t, e.WaitStatus(time.Minute, "every member back on "+vs[0], harness.Healthy), vs[0], "after the rollback")
	})
}

// TestLinearizableReplaceRecoverDefrag: the same check through `member
// replace` of a member that lost its data, a quorum loss (two members
// stopped) recovered by `steward recover` (it restarts them: the data is
// intact), and a rolling `defrag` of about 19 MB of compacted revisions.
func TestLinearizableReplaceRecoverDefrag(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	names := e.Spec().MemberNames()
	r := newLinRun(t, e)
	if !r.op("member replace", func(t *testing.T, e *harness.Env) {
		victim := e.Spec().Members[1]
		e.MustRun("member", "stop", victim.Name)
		if err := os.RemoveAll(filepath.Join(e.Dir, victim.DataDir)); err != nil {
			t.Fatal(err)
		}
		e.MustRun("member", "replace", victim.Name)
		st := e.WaitStatus(time.Minute, "the replaced member healthy and voting", harness.Healthy)
		if st.Cluster.VotingMembers != 3 {
			t.Fatalf("after replace: %d voting members", st.Cluster.VotingMembers)
		}
	}) {
		return
	}
	if !r.op("recover from quorum loss", func(t *testing.T, e *harness.Env) {
		e.MustRun("member", "stop", names[0], "--force")
		e.MustRun("member", "stop", names[1], "--force")
		e.WaitStatus(30*time.Second, "quorum lost", func(st *status.Status) bool { return !st.Cluster.Quorate })
		if rep, out := harness.RecoverJSON(t, e); rep.Action != "restart" {
			t.Fatalf("recover with the data intact: %s", out)
		}
		e.WaitStatus(time.Minute, "healthy after the restart", harness.Healthy)
	}) {
		return
	}
	// Overwritten and compacted revisions (about 19 MB) give the rolling
	// defragmentation something to free (the three members took about 1 s
	// in all, 2026-11-24).
	cli := e.Client()
	big := strings.Repeat("x", 64<<10)
	var rev int64
	for range 300 {
		pr, err := cli.Put(t.Context(), "defrag/key", big)
		if err != nil {
			t.Fatal(err)
		}
		rev = pr.Header.Revision
	}
	if _, err := cli.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r.op("defrag", func(t *testing.T, e *harness.Env) {
		e.MustRun("defrag")
	})
}
