package backupd

import (
	"errors"
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
