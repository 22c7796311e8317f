package core_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestMemberStopDoesNotWaitForWatches stops a follower that holds a
// client's watch stream: it is drained and stopped in well under etcd's
// graceful stop (which waits 7 s for the stream), the watch resumes on
// another member without a compaction error and sees every write, and
// every acknowledged write is readable through the stopped member once it
// is back.
func TestMemberStopDoesNotWaitForWatches(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	v := vs[len(vs)-1]
	e := harness.New(t)
	e.Up(3, v)
	st := e.Status()
	var follower, other string
	for _, m := range st.Members {
		if m.Role == "follower" && follower == "" {
			follower = m.Name
		} else if other == "" {
			other = m.Name
		}
	}
	// The watch's client knows only the follower: its stream is there, and
	// resumes there once the follower is back.
	wcli := e.Client(follower)
	w := workload.Start(t, e.Client(other), workload.Options{Prefix: "w", Interval: 2 * time.Millisecond})
	harness.Eventually(t, 10*time.Second, 10*time.Millisecond, "writes", w.AckedAbove(10))
	seen := map[string]bool{}
	compacted := 0
	wch := wcli.Watch(t.Context(), "w/", clientv3.WithPrefix(), clientv3.WithRev(1))
	read := func(until func() bool) {
		for !until() {
			select {
			case resp, ok := <-wch:
				if !ok {
					t.Fatal("watch channel closed")
				}
				if resp.CompactRevision != 0 {
					compacted++
				}
				for _, ev := range resp.Events {
					seen[string(ev.Kv.Key)] = true
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no watch event in 30 s")
			}
		}
	}
	read(func() bool { return len(seen) >= 10 })

	start := time.Now()
	e.MustRun("member", "stop", follower)
	took := time.Since(start)
	t.Logf("member stop %s with a watch open on it took %s", follower, took.Round(time.Millisecond))
	// Before drained stops, the graceful stop alone took over 7 s.
	if took > 3*time.Second {
		t.Errorf("member stop took %s, want under 3 s (the member was not drained)", took.Round(time.Millisecond))
	}
	before := w.Acked()
	harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "writes to go on", w.AckedAbove(before+20))
	e.MustRun("member", "start", follower)
	e.WaitStatus(time.Minute, follower+" healthy", harness.Healthy)
	res := w.Stop()
	t.Log(res)
	keys := res.Keys()
	read(func() bool {
		for _, k := range keys {
			if !seen[k] {
				return false
			}
		}
		return true
	})
	if compacted > 0 {
		t.Errorf("the watch met %d compaction errors", compacted)
	}
	// Through the stopped member alone, once it has caught up.
	one := e.Client(follower)
	harness.Eventually(t, 30*time.Second, 50*time.Millisecond, follower+" to catch up", func() error {
		return catchUpTo(t, one, res.MaxRev)
	})
	workload.RequireKeys(t, one, res)
}

// catchUpTo fails until cli's member has applied revision rev (a
// serializable read answers from the member alone).
func catchUpTo(t *testing.T, cli *clientv3.Client, rev int64) error {
	g, err := cli.Get(t.Context(), "w/", clientv3.WithSerializable(), clientv3.WithCountOnly(), clientv3.WithPrefix())
	if err != nil {
		return err
	}
	if g.Header.Revision < rev {
		return fmt.Errorf("at revision %d of %d", g.Header.Revision, rev)
	}
	return nil
}
