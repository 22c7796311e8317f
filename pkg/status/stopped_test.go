package status

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestStopped: the status of a stopped cluster, built from the spec alone:
// every member's process Stopped, the timeline it is on, Ready False with
// reason ClusterStopped.
func TestStopped(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: binaries.EmbeddedVersion(), StewardDir: dir, Host: "127.0.0.1",
		FreePort: spec.FreePort("127.0.0.1"), NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster.Cluster{Dir: dir, Spec: s}
	st := Stopped(c, time.Now())
	if !st.Cluster.Stopped || len(st.Members) != 3 || st.Members[0].Process != ProcessStopped {
		t.Errorf("Stopped: %+v", st)
	}
	// The timeline it is on, from the spec: a cluster stopped after a
	// restore (as a restore leaves it) still says which.
	s.Timeline = &spec.Timeline{ID: 3, Parent: 2, BranchRevision: 70, StartRevision: 1_000_000_080}
	if st := Stopped(c, time.Now()); st.Cluster.Timeline != 3 || st.Cluster.ParentTimeline != 2 || st.Cluster.BranchRevision != 70 {
		t.Errorf("Stopped of a cluster on timeline 3 (from 2 at revision 70): %+v", st.Cluster)
	}
	s.Timeline = nil
	if st := Stopped(c, time.Now()); st.Cluster.Timeline != 1 {
		t.Errorf("Stopped of a cluster never restored: timeline %d, want 1", st.Cluster.Timeline)
	}
	if cond, _ := st.Condition(CondReady); cond.Status != "False" || cond.Reason != ReasonClusterStopped {
		t.Errorf("Ready of a stopped cluster: %+v", cond)
	}
}
