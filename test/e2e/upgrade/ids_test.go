package upgrade_test

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/status"
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
	ready := func(st *status.Status) bool {
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
	ids := func(st *status.Status) map[string]string {
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

// TestRestoreUpgradeKeepsEarlierDataDir: an upgrade by restore to V, a
// rollback by restore and an upgrade by restore to V again name the same
// new data dir (DATADIR-vV) as the first plan, whose dir etcd ran on and
// which was kept. The third plan moves it aside (DATADIR-vV.pre-restore-*)
// instead of deleting it, as it does on another host; before, it was
// removed outright.
func TestRestoreUpgradeKeepsEarlierDataDir(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.Up(1, vs[1])
	cli := e.Client()
	e.MustRun("upgrade", "apply", "--to", vs[2], "--strategy", "restore")
	e.WaitStatus(time.Minute, "the member on "+vs[2], harness.Healthy)
	first := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	if _, err := cli.Put(t.Context(), "written-on", vs[2]); err != nil {
		t.Fatal(err)
	}
	e.MustRun("rollback", "--strategy", "restore")
	e.WaitStatus(time.Minute, "the member back on "+vs[1], harness.Healthy)
	if _, err := os.Stat(filepath.Join(first, "member")); err != nil {
		t.Fatalf("the first upgrade's data dir is not kept after the rollback: %v", err)
	}
	e.MustRun("upgrade", "apply", "--to", vs[2], "--strategy", "restore")
	e.WaitStatus(time.Minute, "the member on "+vs[2]+" again", harness.Healthy)
	if got := filepath.Join(e.Dir, e.Spec().Members[0].DataDir); got != first {
		t.Fatalf("the second upgrade by restore names data dir %s, the first named %s", got, first)
	}
	aside, err := filepath.Glob(first + ".pre-restore-*")
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, d := range aside {
		if _, err := os.Stat(filepath.Join(d, "member", "snap", "db")); err == nil {
			kept = true
		}
	}
	if !kept {
		t.Fatalf("the first upgrade's data dir %s, which etcd ran on, is gone: nothing moved aside (%v)", first, aside)
	}
	r, err := cli.Get(t.Context(), "written-on")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != vs[2] {
		t.Fatalf("a write made on %s: %v %v", vs[2], r, err)
	}
}
