package backup_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/test/harness"
)

// revisionWatch is a client of the cluster that holds one watch on a
// prefix across restores (reconnecting, re-listing after a compaction
// error) and reads the cluster's revision beside it, and records anything
// that went backwards: an event at or below a revision already seen, a
// read below one.
type revisionWatch struct {
	mu      sync.Mutex
	seen    map[string]int64 // key -> mod revision of its last event or listing; guarded by mu
	highest int64            // the highest revision the watch saw in an event or a listing; guarded by mu
	read    int64            // the highest revision a read saw (reads and the watch are ordered each on its own); guarded by mu
	relists int              // listings after a compaction error; guarded by mu
	bad     []string         // what went backwards; guarded by mu
	done    chan struct{}
}

func startRevisionWatch(t *testing.T, cli *clientv3.Client, prefix string) *revisionWatch {
	w := &revisionWatch{seen: map[string]int64{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(func() { cancel(); <-w.done })
	// backoff paces the retries of a client whose cluster is down.
	backoff := func() {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { wg.Wait(); close(w.done) }()
	go func() { // the watch
		defer wg.Done()
		from := int64(0) // the last revision delivered: the watch resumes after it
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if from > 0 {
				opts = append(opts, clientv3.WithRev(from+1))
			}
			for wr := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
				if err := wr.Err(); err != nil {
					if errors.Is(err, rpctypes.ErrCompacted) {
						// Re-list at the current revision, then watch on.
						for ctx.Err() == nil {
							rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
							resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix())
							rcancel()
							if err == nil {
								w.list(resp)
								from = resp.Header.Revision
								break
							}
							backoff()
						}
					}
					break
				}
				for _, ev := range wr.Events {
					w.event(string(ev.Kv.Key), ev.Kv.ModRevision)
					from = ev.Kv.ModRevision
				}
			}
			backoff()
		}
	}()
	go func() { // the reads
		defer wg.Done()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			rcancel()
			if err == nil {
				w.readAt(resp.Header.Revision)
			}
			backoff()
		}
	}()
	return w
}

func (w *revisionWatch) event(key string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev <= w.highest {
		w.bad = append(w.bad, fmt.Sprintf("event of %s at revision %d, after revision %d was seen", key, rev, w.highest))
	}
	w.highest = max(w.highest, rev)
	w.seen[key] = rev
}

func (w *revisionWatch) list(resp *clientv3.GetResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if resp.Header.Revision < w.highest {
		w.bad = append(w.bad, fmt.Sprintf("listing at revision %d, after revision %d was seen", resp.Header.Revision, w.highest))
	}
	w.highest = max(w.highest, resp.Header.Revision)
	w.relists++
	w.seen = map[string]int64{}
	for _, kv := range resp.Kvs {
		w.seen[string(kv.Key)] = kv.ModRevision
	}
}

func (w *revisionWatch) readAt(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev < w.read {
		w.bad = append(w.bad, fmt.Sprintf("read at revision %d, after a read at revision %d", rev, w.read))
	}
	w.read = max(w.read, rev)
}

// waitSeen polls until the watch delivered (or listed) key.
func (w *revisionWatch) waitSeen(t *testing.T, key string) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, 50*time.Millisecond, "the watch to see "+key, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.seen[key]; !ok {
			return fmt.Errorf("not seen; the highest revision seen is %d, %d re-lists, went backwards: %v", w.highest, w.relists, w.bad)
		}
		return nil
	})
}

func (w *revisionWatch) check(t *testing.T, when string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) > 0 {
		t.Fatalf("%s: a client saw revisions go backwards or twice: %s", when, strings.Join(w.bad, "; "))
	}
}

func putOne(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), key, "v")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func hasKeys(t *testing.T, cli *clientv3.Client, keys ...string) []string {
	t.Helper()
	var have []string
	for _, k := range keys {
		resp, err := cli.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count > 0 {
			have = append(have, k)
		}
	}
	return have
}

// TestTimelines (issue 26, deliverables 1 and 2, defects 2 and 5): one
// watch held across three restores, one of them to an early revision after
// the history advanced, never sees a revision twice or going backwards (it
// gets a compaction error and re-lists higher); each restore begins a new
// timeline that status and backup list show; a plain restore after writes
// on the new timeline keeps them (latest is the current timeline's newest
// point, not the abandoned history's newer full backup); conflicting
// targets and an unknown timeline are refused before anything changes.
func TestTimelines(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, "3.6.16", nil)
	e.MustRun("up")
	harness.BackupNow(t, e)
	cli := e.Client()
	w := startRevisionWatch(t, cli, "tl/")

	// Timeline 1.
	early := putOne(t, cli, "tl/t1-early")
	for i := range 20 {
		putOne(t, cli, fmt.Sprintf("tl/t1-%02d", i))
	}
	end1 := putOne(t, cli, "tl/t1-last")
	w.waitSeen(t, "tl/t1-last")
	harness.WaitBackedUp(t, e, end1)
	if st := e.Status(); st.Cluster.Timeline != 1 {
		t.Fatalf("status: timeline %d before any restore, want 1", st.Cluster.Timeline)
	}

	e.MustRun("down")
	// Defect 5: two targets at once are refused before anything changes.
	if out := e.MustFail("restore", "--force", "--to-revision", fmt.Sprint(early), "--to-time", time.Now().UTC().Format(time.RFC3339)); !strings.Contains(out, "give one of --to-revision and --to-time") {
		t.Errorf("restore with --to-revision and --to-time: %s", out)
	}
	if out := e.MustFail("restore", "--force", "--timeline", "9"); !strings.Contains(out, "unknown timeline 9") || !strings.Contains(out, "backup list") {
		t.Errorf("restore --timeline 9: %s", out)
	}
	if st := e.StoppedStatus(); st.Cluster.Timeline != 1 {
		t.Fatalf("a refused restore changed the timeline to %d", st.Cluster.Timeline)
	}
	if aside, _ := filepath.Glob(filepath.Join(e.Dir, "members", "*", "data.pre-restore-*")); len(aside) > 0 {
		t.Fatalf("a refused restore moved data dirs aside: %v", aside)
	}

	// Timeline 2: the newest point of timeline 1.
	e.MustRun("restore", "--force")
	e.MustRun("up")
	w.waitSeen(t, "tl/t1-last") // re-listed after the compaction error
	st := e.Status()
	if st.Cluster.Timeline != 2 || st.Cluster.ParentTimeline != 1 || st.Cluster.BranchRevision < end1 {
		t.Fatalf("status after the first restore: timeline %d (parent %d at %d), want 2 branched off 1 at or after %d",
			st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, end1)
	}
	end2 := putOne(t, cli, "tl/t2-abandoned")
	w.waitSeen(t, "tl/t2-abandoned")
	harness.WaitBackedUp(t, e, end2)
	w.check(t, "after the first restore")

	// Timeline 3: back to an early revision of timeline 1, after the
	// history advanced: etcd must resume above timeline 2's revisions.
	e.MustRun("down")
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(early))
	e.MustRun("up")
	w.waitSeen(t, "tl/t1-early")
	st = e.Status()
	if st.Cluster.Timeline != 3 || st.Cluster.ParentTimeline != 1 || st.Cluster.BranchRevision != early {
		t.Fatalf("status after restoring revision %d: timeline %d (parent %d at %d), want 3 branched off 1 at %d",
			early, st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, early)
	}
	if have := hasKeys(t, cli, "tl/t1-early", "tl/t1-last", "tl/t2-abandoned"); !slices.Equal(have, []string{"tl/t1-early"}) {
		t.Fatalf("restored to revision %d: keys %v, want only tl/t1-early", early, have)
	}
	var end3 int64
	for i := range 5 {
		end3 = putOne(t, cli, fmt.Sprintf("tl/t3-%d", i))
	}
	if end3 <= end2 {
		t.Fatalf("a write on timeline 3 got revision %d, not above %d, served on timeline 2", end3, end2)
	}
	w.waitSeen(t, "tl/t3-4")
	harness.WaitBackedUp(t, e, end3)
	w.check(t, "after the restore to an early revision")

	// backup list: every backup names its timeline; timeline 3's carry
	// their branch point.
	byTimeline := map[int64]int{}
	for _, m := range harness.ListBackups(t, e) {
		byTimeline[m.Timeline]++
		if m.Timeline == 3 && (m.ParentTimeline != 1 || m.BranchRevision != early) {
			t.Errorf("backup %s of timeline 3: parent %d at %d, want 1 at %d", m.ID, m.ParentTimeline, m.BranchRevision, early)
		}
	}
	if byTimeline[1] == 0 || byTimeline[2] == 0 || byTimeline[3] == 0 {
		t.Errorf("backups per timeline %v: want some of 1, 2 and 3", byTimeline)
	}

	// Timeline 4: a plain restore is the newest point of timeline 3, with
	// its writes, not timeline 2's newer history.
	e.MustRun("down")
	e.MustRun("restore", "--force")
	e.MustRun("up")
	w.waitSeen(t, "tl/t3-4")
	if have := hasKeys(t, cli, "tl/t1-early", "tl/t1-last", "tl/t2-abandoned", "tl/t3-4"); !slices.Equal(have, []string{"tl/t1-early", "tl/t3-4"}) {
		t.Fatalf("a plain restore after writes on timeline 3: keys %v, want tl/t1-early and tl/t3-4", have)
	}
	if st := e.Status(); st.Cluster.Timeline != 4 || st.Cluster.ParentTimeline != 3 || st.Cluster.BranchRevision < end3 {
		t.Fatalf("status after the third restore: timeline %d (parent %d at %d), want 4 branched off 3 at or after %d",
			st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, end3)
	}
	end4 := putOne(t, cli, "tl/t4")
	w.waitSeen(t, "tl/t4")
	if end4 <= end3 {
		t.Fatalf("a write on timeline 4 got revision %d, not above %d", end4, end3)
	}
	w.check(t, "after the third restore")

	// Another timeline is chosen explicitly: timeline 2's newest point.
	harness.WaitBackedUp(t, e, end4)
	e.MustRun("down")
	e.MustRun("restore", "--force", "--timeline", "2")
	e.MustRun("up")
	w.waitSeen(t, "tl/t2-abandoned")
	if have := hasKeys(t, cli, "tl/t2-abandoned", "tl/t3-4", "tl/t4"); !slices.Equal(have, []string{"tl/t2-abandoned"}) {
		t.Fatalf("restore --timeline 2: keys %v, want tl/t2-abandoned only", have)
	}
	putOne(t, cli, "tl/t5")
	w.waitSeen(t, "tl/t5")
	w.check(t, "after restoring timeline 2")
}
