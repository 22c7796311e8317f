package status

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
)

// TestRecordingMessage: BackupReady while recording quotes the stored
// revision beside the cluster's current one and the upload's age, so it
// never reads as current when the cluster has moved on.
func TestRecordingMessage(t *testing.T) {
	now := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	bs := backup.LoopStatus{Agent: "local", Recording: true, NextRevision: 1000000068, LastUpload: now.Add(-90 * time.Second)}
	for _, tc := range []struct {
		name string
		live int64
		want string
	}{
		{"caught up", 1000000067, "agent local records every change: every revision up to the cluster's 1000000067 stored, last upload 1m30s ago"},
		{"cluster ahead", 1000000104, "agent local records every change: revisions up to 1000000067 stored, the cluster is at 1000000104 (revisions 1000000068 to 1000000104 are in the segment being recorded), last upload 1m30s ago"},
		{"cluster revision unknown", 0, "agent local records every change: revisions up to 1000000067 stored, last upload 1m30s ago"},
	} {
		if got := recordingMessage(bs, tc.live, now); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
