package upgrade_test

import (
	"maps"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/test/harness"
)

// TestRestoreUpgradeKeepsIDs (issue 26, defect 4, for the upgrade by
// restore, which rebuilds every data dir as a restore does): after a
// member added and an original member removed at run time, an upgrade
// with the restore strategy keeps the cluster ID and every member's ID.
// Before the fix the new data dirs were built from the spec's initial
// cluster: a new cluster ID and a new ID for etcd-4.
func TestRestoreUpgradeKeepsIDs(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(3, vs[1])
	e.MustRun("member", "add", "etcd-4")
	e.MustRun("member", "remove", "etcd-1")
	ready := func(st *cluster.Status) bool {
		if !harness.Healthy(st) || len(st.Members) != 3 {
			return false
		}
		for _, m := range st.Members {
			if m.ID == "" {
				return false
			}
		}
		return true
	}
	ids := func(st *cluster.Status) map[string]string {
		out := map[string]string{}
		for _, m := range st.Members {
			out[m.Name] = m.ID
		}
		return out
	}
	before := e.WaitStatus(time.Minute, "three members with IDs", ready)
	e.MustRun("upgrade", "apply", "--to", vs[2], "--strategy", "restore")
	after := e.WaitStatus(time.Minute, "three members with IDs on "+vs[2], ready)
	harness.RequireVersion(t, after, vs[2], "after the upgrade by restore")
	if after.Cluster.ID != before.Cluster.ID {
		t.Errorf("cluster ID %s after the upgrade by restore, %s before", after.Cluster.ID, before.Cluster.ID)
	}
	if a, b := ids(after), ids(before); !maps.Equal(a, b) {
		t.Errorf("member IDs %v after the upgrade by restore, %v before", a, b)
	}
}
