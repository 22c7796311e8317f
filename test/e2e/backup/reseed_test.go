package backup_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// TestReseedRevisionsNeverGoBack (issue 26, deliverable 2, for recovery's
// reseed): one member stops while the other two still serve writes, which
// an etcd watch and reads see; then the two lose their data, and `steward
// recover` rebuilds the cluster from the stopped member (a reseed: it is
// at the newest backup). The lost majority served revisions the seed never
// applied (those writes are gone with it: no survivor and no backup holds
// them). The watch and the reads, held across the quorum loss
// (reconnecting, re-listing after a compaction error), must never see a
// revision twice or going backwards: the seed resumes above every
// revision served, on a new timeline. The recovery is killed twice in
// its rebuild of the seed and resumes each time. Every write the seed acknowledged
// is present on every member (the learners receive the seed's snapshot,
// not a replay of an older log), the cluster ID and the seed's member ID
// are kept, and its old data dir is moved aside.
func TestReseedRevisionsNeverGoBack(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[1], func(s *spec.Cluster) { s.Backup.Continuous = false })
	e.MustRun("up")
	names := e.Spec().MemberNames()
	cli := e.Client()
	w := harness.StartRevisionWatch(t, cli, "rs/")

	var kept []string
	for i := range 20 {
		kept = append(kept, fmt.Sprintf("rs/kept-%02d", i))
		putOne(t, cli, kept[i])
	}
	w.WaitSeen(t, kept[len(kept)-1])
	full := harness.BackupNow(t, e)
	before := e.Status()

	// The seed-to-be stops cleanly; the other two go on serving writes
	// that it never receives, and the watch sees them.
	e.MustRun("member", "stop", names[2], "--force")
	var lost int64
	for i := range 10 {
		lost = putOne(t, cli, fmt.Sprintf("rs/lost-%02d", i))
	}
	w.WaitSeen(t, "rs/lost-09")
	w.Check(t, "before the quorum loss")

	e.KillAll()
	harness.RemoveDataDirs(t, e, e.Spec().Members[:2])
	_, _, _ = e.Run("up", "--timeout", "10s")
	// The recovery is killed twice: while the seed's new data dir is
	// staged (before the old one is moved aside), then, resumed, right
	// after the rebuilt data dir is committed. Each re-run resumes.
	for _, point := range []string{crashpoint.Indexed(crashpoint.RestoreStaged, 0), crashpoint.RecoverReseedRebuilt} {
		_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "recover")
		if err == nil || !strings.Contains(se, "crashpoint: "+point) {
			t.Fatalf("recover with %s: %v, want it killed there\n%s", point, err, se)
		}
	}
	rep, out := harness.RecoverJSON(t, e)
	if rep.Action != "resume" || rep.Seed != names[2] || rep.RestoredFrom != "" || !slices.Equal(rep.Added, names[:2]) {
		t.Fatalf("recover after two kills: want the reseed from %s resumed, adding %v: %s", names[2], names[:2], out)
	}
	st := e.WaitStatus(time.Minute, "healthy after the reseed", harness.Healthy)

	var after []string
	var end int64
	for i := range 5 {
		after = append(after, fmt.Sprintf("rs/after-%d", i))
		end = putOne(t, cli, after[i])
	}
	if end <= lost {
		t.Errorf("a write after the reseed got revision %d, not above revision %d, which the lost majority served", end, lost)
	}
	// The reads reach the new revisions (or record going backwards).
	w.WaitRead(t, end)
	w.Check(t, "after the reseed")
	w.WaitSeen(t, after[len(after)-1])
	w.Check(t, "after the reseed")

	// Every acknowledged write the seed held, and every one after, on
	// every member; the lost majority's alone are gone.
	want := append(slices.Clone(kept), after...)
	for _, n := range names {
		mc := e.Client(n)
		// Each member serves the seed's history from above the bump, not
		// a replay of an older raft log into an empty store.
		resp, err := mc.Get(t.Context(), "rs/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision < end || resp.Count != int64(len(want)) {
			t.Errorf("member %s serves revision %d with %d keys under rs/, want revision %d or later with %d", n, resp.Header.Revision, resp.Count, end, len(want))
		}
		if have := hasKeys(t, mc, append(slices.Clone(want), "rs/lost-00")...); !slices.Equal(have, want) {
			t.Errorf("member %s after the reseed holds %d of the %d keys wanted (and lost-00: %v)", n, len(have), len(want), slices.Contains(have, "rs/lost-00"))
		}
		mc.Close()
	}
	// The first, killed rebuild took a timeline number (recorded in the
	// store before staging); the second one's is the cluster's.
	if st.Cluster.Timeline != before.Cluster.Timeline+2 || st.Cluster.ParentTimeline != before.Cluster.Timeline || st.Cluster.BranchRevision < full.EndRevision {
		t.Errorf("status after the reseed: timeline %d (parent %d at %d), want %d branched off %d at or after %d",
			st.Cluster.Timeline, st.Cluster.ParentTimeline, st.Cluster.BranchRevision, before.Cluster.Timeline+2, before.Cluster.Timeline, full.EndRevision)
	}
	if st.Cluster.ID != before.Cluster.ID || st.Cluster.VotingMembers != 3 {
		t.Errorf("after the reseed: cluster %s (was %s), %d voters", st.Cluster.ID, before.Cluster.ID, st.Cluster.VotingMembers)
	}
	if was, _ := before.Member(names[2]); was.ID != st.Members[2].ID {
		t.Errorf("the seed's member ID changed: %s, was %s", st.Members[2].ID, was.ID)
	}
	seedDir := filepath.Join(e.Dir, filepath.Dir(e.Spec().Members[2].DataDir))
	if aside, _ := filepath.Glob(filepath.Join(seedDir, "data.pre-restore-*Z")); len(aside) != 1 {
		t.Errorf("the seed's old data dir kept aside: %v, want one", aside)
	}
	if staged, _ := filepath.Glob(filepath.Join(seedDir, "data.restoring-*")); len(staged) != 0 {
		t.Errorf("the killed rebuild's staged data dir is still there: %v", staged)
	}
}
