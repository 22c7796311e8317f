package backup_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/test/harness"
)

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
	w := harness.StartRevisionWatch(t, cli, "tl/")

	// Timeline 1.
	early := putOne(t, cli, "tl/t1-early")
	for i := range 20 {
		putOne(t, cli, fmt.Sprintf("tl/t1-%02d", i))
	}
	end1 := putOne(t, cli, "tl/t1-last")
	w.WaitSeen(t, "tl/t1-last")
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
	w.WaitSeen(t, "tl/t1-last") // re-listed after the compaction error
	st := e.Status()
	if st.Cluster.Timeline != 2 || st.Cluster.ParentTimeline != 1 || st.Cluster.BranchRevision < end1 {
		t.Fatalf("status after the first restore: timeline %d (parent %d at %d), want 2 branched off 1 at or after %d",
			st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, end1)
	}
	end2 := putOne(t, cli, "tl/t2-abandoned")
	w.WaitSeen(t, "tl/t2-abandoned")
	harness.WaitBackedUp(t, e, end2)
	w.Check(t, "after the first restore")

	// Timeline 3: back to an early revision of timeline 1, after the
	// history advanced: etcd must resume above timeline 2's revisions.
	e.MustRun("down")
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(early))
	e.MustRun("up")
	w.WaitSeen(t, "tl/t1-early")
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
	w.WaitSeen(t, "tl/t3-4")
	harness.WaitBackedUp(t, e, end3)
	w.Check(t, "after the restore to an early revision")

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
	w.WaitSeen(t, "tl/t3-4")
	if have := hasKeys(t, cli, "tl/t1-early", "tl/t1-last", "tl/t2-abandoned", "tl/t3-4"); !slices.Equal(have, []string{"tl/t1-early", "tl/t3-4"}) {
		t.Fatalf("a plain restore after writes on timeline 3: keys %v, want tl/t1-early and tl/t3-4", have)
	}
	if st := e.Status(); st.Cluster.Timeline != 4 || st.Cluster.ParentTimeline != 3 || st.Cluster.BranchRevision < end3 {
		t.Fatalf("status after the third restore: timeline %d (parent %d at %d), want 4 branched off 3 at or after %d",
			st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, end3)
	}
	end4 := putOne(t, cli, "tl/t4")
	w.WaitSeen(t, "tl/t4")
	if end4 <= end3 {
		t.Fatalf("a write on timeline 4 got revision %d, not above %d", end4, end3)
	}
	w.Check(t, "after the third restore")

	// Another timeline is chosen explicitly: timeline 2's newest point.
	harness.WaitBackedUp(t, e, end4)
	e.MustRun("down")
	e.MustRun("restore", "--force", "--timeline", "2")
	e.MustRun("up")
	w.WaitSeen(t, "tl/t2-abandoned")
	if have := hasKeys(t, cli, "tl/t2-abandoned", "tl/t3-4", "tl/t4"); !slices.Equal(have, []string{"tl/t2-abandoned"}) {
		t.Fatalf("restore --timeline 2: keys %v, want tl/t2-abandoned only", have)
	}
	putOne(t, cli, "tl/t5")
	w.WaitSeen(t, "tl/t5")
	w.Check(t, "after restoring timeline 2")
}
