package backupd

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
)

// TestTrusted: the loop never continues from a manifest of its cluster
// that claims a revision above the live cluster's or a creation time in
// the future, and names each one it drops, with those List ignored.
func TestTrusted(t *testing.T) {
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	ok := backup.Manifest{ID: "a", ClusterID: "c1", EndRevision: 100, CreatedAt: now.Add(-time.Hour)}
	tests := []struct {
		name        string
		m           backup.Manifest
		wantTrusted bool
		wantReason  string
	}{
		{"fine", ok, true, ""},
		{"at the live revision", backup.Manifest{ID: "b", ClusterID: "c1", EndRevision: 500, CreatedAt: now}, true, ""},
		{"ahead of the cluster", backup.Manifest{ID: "f", ClusterID: "c1", EndRevision: 999999999999, CreatedAt: now}, false, "claims revision 999999999999, but the cluster is at revision 500"},
		{"created in 2030", backup.Manifest{ID: "g", ClusterID: "c1", EndRevision: 10, CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, false, "created in the future"},
		{"another cluster", backup.Manifest{ID: "o", ClusterID: "c2", EndRevision: 999999999999, CreatedAt: now}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := backup.Listing{Backups: []backup.Manifest{tc.m}, Ignored: []backup.Ignored{{Name: "full/x.json", Reason: "corrupt", Err: errors.New("corrupt")}}}
			got, ignored := trusted(l, "c1", 500, now)
			if (len(got) == 1) != tc.wantTrusted {
				t.Errorf("trusted %v, want %v", got, tc.wantTrusted)
			}
			if ignored[0] != "full/x.json: corrupt" {
				t.Errorf("List's ignored manifest not reported: %v", ignored)
			}
			if tc.wantReason != "" && (len(ignored) != 2 || !strings.Contains(ignored[1], tc.wantReason)) {
				t.Errorf("ignored %v, want %q", ignored, tc.wantReason)
			}
		})
	}
}

// TestBehindRevision: the revision the cluster had reached a lag window
// ago, once a sample is that old.
func TestBehindRevision(t *testing.T) {
	now := time.Now()
	if got := behindRevision(nil, now); got != 0 {
		t.Errorf("no samples: %d", got)
	}
	young := []revSample{{now.Add(-time.Second), 10}}
	if got := behindRevision(young, now); got != 0 {
		t.Errorf("only a young sample: %d", got)
	}
	old := []revSample{{now.Add(-lagWindow - time.Second), 7}, {now.Add(-time.Second), 10}}
	if got := behindRevision(old, now); got != 7 {
		t.Errorf("got %d, want 7", got)
	}
}

// TestOwnChains: the loop continues only its cluster's chains on the
// current timeline; another timeline's newer full backup (an abandoned
// history) or another cluster's is never continued.
func TestOwnChains(t *testing.T) {
	t2 := backup.Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 100}
	t3 := backup.Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 60}
	all := []backup.Manifest{
		{ID: "t1-full", Kind: backup.KindFull, ClusterID: "c1", EndRevision: 100},
		{ID: "t2-full", Kind: backup.KindFull, ClusterID: "c1", EndRevision: 1_000_000_101, Lineage: t2},
		{ID: "t3-full", Kind: backup.KindFull, ClusterID: "c1", EndRevision: 2_000_000_101, Lineage: t3},
		{ID: "t3-delta", Kind: backup.KindDelta, ClusterID: "c1", StartRevision: 2_000_000_102, EndRevision: 2_000_000_110, Lineage: t3},
		{ID: "other-t3", Kind: backup.KindFull, ClusterID: "c2", EndRevision: 5, Lineage: t3},
	}
	for tl, want := range map[int64][]string{1: {"t1-full"}, 2: {"t2-full"}, 3: {"t3-full", "t3-delta"}, 4: nil} {
		var got []string
		for _, m := range ownChains(all, "c1", tl) {
			got = append(got, m.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("timeline %d: %v, want %v", tl, got, want)
		}
	}
}
