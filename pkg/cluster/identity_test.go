package cluster

import (
	"testing"

	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestSnapshotMemberID: a member is found in a snapshot's members by
// name, or, for a member added that never started (no name), by its peer
// URL; a named member with the same URL is not taken for another.
func TestSnapshotMemberID(t *testing.T) {
	snap := []datadir.SnapshotMember{
		{ID: 1, Name: "etcd-1", PeerURLs: []string{"https://10.0.0.1:2380"}},
		{ID: 2, Name: "", PeerURLs: []string{"https://10.0.0.4:2380"}},
		{ID: 3, Name: "etcd-3", PeerURLs: []string{"https://10.0.0.3:2380"}},
	}
	for _, tt := range []struct {
		m    spec.Member
		want uint64
	}{
		{spec.Member{Name: "etcd-1", PeerURL: "https://10.0.0.9:2380"}, 1},
		{spec.Member{Name: "etcd-4", PeerURL: "https://10.0.0.4:2380"}, 2},
		{spec.Member{Name: "etcd-5", PeerURL: "https://10.0.0.3:2380"}, 0},
		{spec.Member{Name: "etcd-6", PeerURL: "https://10.0.0.6:2380"}, 0},
	} {
		if got := snapshotMemberID(snap, tt.m); got != tt.want {
			t.Errorf("%s (%s): %d, want %d", tt.m.Name, tt.m.PeerURL, got, tt.want)
		}
	}
}
