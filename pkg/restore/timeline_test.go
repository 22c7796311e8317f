package restore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

var tlAt = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// timeline1 is a cluster never restored: full backups at revisions 60
// and 130 on timeline 1.
func timeline1() []backup.Manifest {
	var out []backup.Manifest
	for i, rev := range []int64{60, 130} {
		at := tlAt.Add(time.Duration(i) * time.Hour)
		out = append(out, backup.Manifest{ID: backup.NewID(backup.KindFull, at, rev), Kind: backup.KindFull, ClusterID: "c",
			StartRevision: 1, EndRevision: rev, CreatedAt: at, MAC: "x"})
	}
	return out
}

// testCluster is a Steward directory with an empty spec (no timeline
// recorded) and a store; said collects its progress.
func testCluster(t *testing.T) (*cluster.Cluster, *backup.LocalStore, *backup.AuthKey, *[]string) {
	t.Helper()
	var said []string
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}, Progress: func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }}
	auth, err := c.BackupAuthKey()
	if err != nil {
		t.Fatal(err)
	}
	return c, &backup.LocalStore{Dir: t.TempDir()}, auth, &said
}

// abandon records timeline n as a restore's prepare does, to revision
// branch of timeline 1, and stops there (killed before its commit).
func abandon(t *testing.T, s backup.Store, auth *backup.AuthKey, n, branch int64) backup.TimelineRecord {
	t.Helper()
	r := backup.TimelineRecord{Lineage: backup.Lineage{Timeline: n, ParentTimeline: 1, BranchRevision: branch},
		StartRevision: 1_000_000_130 * n, ClusterID: "c", Source: "x", CreatedAt: tlAt.Add(2 * time.Hour)}
	if err := backup.PutTimeline(t.Context(), s, auth, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCurrentTimelineSkipsAbandoned (issue 26, timelines): a restore of a
// cluster never restored, to revision 60, killed after its prepare left
// timeline 2's record in the store, and the spec unchanged. The next plain
// restore must stay on timeline 1 (its newest point, revision 130), not
// take the abandoned timeline 2 as current and restore its branch point
// (revision 60), silently leaving out every write after it. Before the
// fix, currentTimeline returned 2.
func TestCurrentTimelineSkipsAbandoned(t *testing.T) {
	c, store, auth, said := testCluster(t)
	backups := timeline1()
	abandon(t, store, auth, 2, 60)
	h, err := loadHistory(t.Context(), c, store, backups)
	if err != nil {
		t.Fatal(err)
	}
	if got := currentTimeline(c, h); got != 1 {
		t.Fatalf("current timeline after a restore killed before its commit: %d, want 1 (said %q)", got, *said)
	}
	tg, err := backup.Resolve(backups, h, currentTimeline(c, h), 0, time.Time{})
	if err != nil || tg != (backup.Target{Timeline: 1}) {
		t.Fatalf("Resolve of the current timeline = %+v, %v; want timeline 1's newest point", tg, err)
	}
	if h.Newest() != 2 {
		t.Errorf("the abandoned timeline's number is free again: newest %d, want 2 (the next restore takes 3)", h.Newest())
	}
}

// TestTimelineCommitSelection: what counts as committed. A timeline is the
// current one by fallback once its commit marker is in the store, or once
// it has a backup of its own (a store written by a Steward before
// markers); the spec's timeline is current whatever the store holds; an
// abandoned timeline without backups is refused when asked for; the
// spec's timeline gets its missing marker from the next restore; and a
// marker that does not match its record is ignored and reported.
func TestTimelineCommitSelection(t *testing.T) {
	ctx := t.Context()
	c, store, auth, said := testCluster(t)
	backups := timeline1()
	r2 := abandon(t, store, auth, 2, 60)
	h, err := loadHistory(ctx, c, store, backups)
	if err != nil {
		t.Fatal(err)
	}
	_, err = backup.Resolve(backups, h, 2, 0, time.Time{})
	if !errors.Is(err, backup.ErrAbandonedTimeline) {
		t.Fatalf("--timeline 2 (abandoned, no backup): %v, want ErrAbandonedTimeline", err)
	}
	if err := refusalOf(err); !errors.Is(err, ErrAbandonedTimeline) || !strings.Contains(err.Error(), "timeline 1 at revision 60") || strings.Contains(err.Error(), "--") {
		t.Errorf("refusal %q: want ErrAbandonedTimeline naming where it would restore, and no flag", err)
	}

	// Committed: the marker makes it current.
	if err := backup.PutTimelineCommit(ctx, store, auth, r2, tlAt.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if h, err = loadHistory(ctx, c, store, backups); err != nil {
		t.Fatal(err)
	}
	if got := currentTimeline(c, h); got != 2 {
		t.Fatalf("current timeline with timeline 2 committed: %d, want 2", got)
	}
	if tg, err := backup.Resolve(backups, h, 2, 0, time.Time{}); err != nil || tg != (backup.Target{Timeline: 1, ToRevision: 60, Via: 2}) {
		t.Errorf("Resolve of committed timeline 2 without a backup = %+v, %v; want its branch point", tg, err)
	}

	// Timeline 3 of an older Steward: a record without a marker, but
	// backed up on (so committed); timeline 4 abandoned after it.
	abandon(t, store, auth, 3, 130)
	abandon(t, store, auth, 4, 60)
	at := tlAt.Add(5 * time.Hour)
	on3 := backup.Manifest{ID: backup.NewID(backup.KindFull, at, 3_000_000_400), Kind: backup.KindFull, ClusterID: "c",
		StartRevision: 1, EndRevision: 3_000_000_400, CreatedAt: at, MAC: "x",
		Lineage: backup.Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 130}}
	withOld := append(timeline1(), on3)
	*said = nil
	if h, err = loadHistory(ctx, c, store, withOld); err != nil {
		t.Fatal(err)
	}
	if got := currentTimeline(c, h); got != 3 {
		t.Fatalf("current timeline with an older Steward's backed-up timeline 3 and abandoned 4: %d, want 3", got)
	}
	if msg := strings.Join(*said, "\n"); !strings.Contains(msg, "timeline 3") || !strings.Contains(msg, "4") {
		t.Errorf("the fallback did not say what it read and what it left out: %q", msg)
	}

	// The spec names timeline 4 (an older Steward committed it and wrote
	// no marker): it is current, and restorable.
	c.Spec.Timeline = &spec.Timeline{ID: 4, Parent: 1, BranchRevision: 60, StartRevision: 4_000_000_520}
	if h, err = loadHistory(ctx, c, store, withOld); err != nil {
		t.Fatal(err)
	}
	if got := currentTimeline(c, h); got != 4 {
		t.Fatalf("current timeline with the spec naming 4: %d", got)
	}
	if _, err := backup.Resolve(withOld, h, 4, 0, time.Time{}); err != nil {
		t.Errorf("Resolve of the spec's timeline 4: %v", err)
	}
	// The next restore from this spec writes timeline 4's missing marker
	// (healCommit), so a spec without a timeline takes it too.
	healCommit(ctx, c, store, auth)
	c.Spec.Timeline = nil
	if h, err = loadHistory(ctx, c, store, withOld); err != nil {
		t.Fatal(err)
	}
	if got := currentTimeline(c, h); got != 4 {
		t.Fatalf("current timeline after timeline 4's marker was healed: %d, want 4", got)
	}

	// A marker bound to another record (copied over timeline 5's name) is
	// ignored and reported, and marks nothing.
	r5 := abandon(t, store, auth, 5, 60)
	other := r2
	other.Timeline = 5
	if err := backup.PutTimelineCommit(ctx, store, auth, other, tlAt); err != nil {
		t.Fatal(err)
	}
	recs, ign, err := backup.ListTimelines(ctx, store, auth)
	if err != nil || len(recs) != 4 || len(ign) != 1 || ign[0].Name != backup.TimelineCommitObject(5) {
		t.Fatalf("ListTimelines with a mismatched marker = %d records, ignored %+v, %v", len(recs), ign, err)
	}
	for _, r := range recs {
		if want := r.Timeline == 2 || r.Timeline == 4; r.Committed != want {
			t.Errorf("timeline %d committed %v, want %v (%+v)", r.Timeline, r.Committed, want, r5)
		}
	}
}

// TestNewTimelineAboveUntrusted: a history object the cluster's key does
// not verify (another key's record of timeline 2) is never used, but its
// number is taken: PutTimeline never replaces it. Before the fix the new
// timeline was numbered from the trusted records only (2), so every later
// restore failed recording it ("already exists") after fetching and
// bumping.
func TestNewTimelineAboveUntrusted(t *testing.T) {
	ctx := t.Context()
	c, store, auth, _ := testCluster(t)
	other, err := (&cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}}).BackupAuthKey()
	if err != nil {
		t.Fatal(err)
	}
	abandon(t, store, other, 2, 60)
	h, err := loadHistory(ctx, c, store, timeline1())
	if err != nil {
		t.Fatal(err)
	}
	if h.Newest() != 1 {
		t.Fatalf("the untrusted record counts in the history: newest %d, want 1", h.Newest())
	}
	id, err := newTimelineID(ctx, c, store, h)
	if err != nil || id != 3 {
		t.Fatalf("new timeline = %d, %v; want 3 (2's name is taken by a record under another key)", id, err)
	}
	abandon(t, store, auth, id, 60)
	if id, err := newTimelineID(ctx, c, nil, h); err != nil || id != 2 {
		t.Errorf("without a store: %d, %v; want 2", id, err)
	}
}

// TestMemberTimelineIsCurrent: a restore from a member's own database
// (recovery's reseed) branches off the timeline the cluster is on, by the
// rule of a restore from the store: with a spec that records no timeline
// (a new Steward directory on a store that branched to timeline 2, with
// timeline 3 abandoned after it), that is the store's newest committed
// one, 2, not timeline 1 (the spec's default) nor the abandoned 3; with a
// spec that records one, the spec's. Before the fix the reseed took the
// spec's alone: 1.
func TestMemberTimelineIsCurrent(t *testing.T) {
	ctx := t.Context()
	c, store, auth, _ := testCluster(t)
	backups := timeline1()
	r2 := abandon(t, store, auth, 2, 60)
	if err := backup.PutTimelineCommit(ctx, store, auth, r2, tlAt.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	abandon(t, store, auth, 3, 130)
	h, err := loadHistory(ctx, c, store, backups)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberTimeline(c, h); got != 2 {
		t.Fatalf("timeline a reseed branches off, the spec recording none: %d, want 2 (the store's newest committed)", got)
	}
	c.Spec.Timeline = &spec.Timeline{ID: 4, Parent: 2, BranchRevision: 90, StartRevision: 4_000_000_520}
	if got := memberTimeline(c, h); got != 4 {
		t.Fatalf("timeline a reseed branches off, the spec recording 4: %d, want 4", got)
	}
}

// TestFileHistoryRefusesUnreadableStore: a restore from a snapshot file or
// a member's own database (recovery's reseed) whose store cannot be read
// is refused, never numbered from the spec alone: the store holds
// timeline 3 (a restore from another Steward directory on the same store,
// committed there) that the spec (on timeline 2) never saw, and a
// timeline numbered from the spec would be 3 again. Before the fix the
// store was left out with a warning and the number came from the spec.
func TestFileHistoryRefusesUnreadableStore(t *testing.T) {
	ctx := t.Context()
	c, store, auth, _ := testCluster(t)
	c.Spec.Timeline = &spec.Timeline{ID: 2, Parent: 1, BranchRevision: 60, StartRevision: 1_000_000_130}
	c.Spec.Backup.Store = store.Dir
	abandon(t, store, auth, 2, 60)
	abandon(t, store, auth, 3, 130)
	h, _, s, err := fileHistory(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := newTimelineID(ctx, c, s, h); err != nil || id != 4 {
		t.Fatalf("new timeline with the store readable: %d, %v; want 4", id, err)
	}

	// The store unreadable: its directory is a file.
	c.Spec.Backup.Store = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(c.Spec.Backup.Store, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = fileHistory(ctx, c)
	if !errors.Is(err, ErrStoreUnreadable) || !strings.Contains(err.Error(), "timelines cannot be read") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("fileHistory with an unreadable store: %v; want ErrStoreUnreadable", err)
	}
}
