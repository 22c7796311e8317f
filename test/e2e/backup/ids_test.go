package backup_test

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// memberIDs maps each member's name to its etcd ID, as status reports it.
func memberIDs(st *status.Status) map[string]string {
	ids := map[string]string{}
	for _, m := range st.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

// healthyWithIDs waits until every member of the spec is healthy and has
// an ID in status.
func healthyWithIDs(e *harness.Env, n int) *status.Status {
	return e.WaitStatus(60*time.Second, "every member healthy with its ID", func(st *status.Status) bool {
		if !harness.Healthy(st) || len(st.Members) != n {
			return false
		}
		for _, m := range st.Members {
			if m.ID == "" || !m.Healthy {
				return false
			}
		}
		return true
	})
}

// TestRestoreKeepsIDs (issue 26, defect 4): after run-time membership
// changes (a member added, an original member removed, one replaced: each
// gives etcd a member ID its initial cluster does not derive), a restore
// keeps the cluster ID and every member's ID; the backups taken after it
// are of the same cluster, so `restore` (latest) picks them and the
// backup from before the restore is not refused as another cluster's.
// Before the fix the restore derived every ID from the spec's initial
// cluster: a new cluster ID, new IDs for etcd-2 and etcd-4.
func TestRestoreKeepsIDs(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	e.MustRun("member", "add", "etcd-4")
	e.MustRun("member", "remove", "etcd-1")
	e.MustRun("member", "replace", "etcd-2")
	before := healthyWithIDs(e, 3)
	ids := memberIDs(before)
	cli := e.Client()
	putKeys(t, cli, "ids/", 100)
	cli.Close()
	first := harness.BackupNow(t, e)
	if first.ClusterID != before.Cluster.ID {
		t.Fatalf("backup of cluster %s, status says %s", first.ClusterID, before.Cluster.ID)
	}

	check := func(when string) {
		t.Helper()
		st := healthyWithIDs(e, 3)
		if st.Cluster.ID != before.Cluster.ID {
			t.Errorf("%s: cluster ID %s, want %s (as before the restore)", when, st.Cluster.ID, before.Cluster.ID)
		}
		if got := memberIDs(st); !maps.Equal(got, ids) {
			t.Errorf("%s: member IDs %v, want %v (as before the restore)", when, got, ids)
		}
		cli := e.Client()
		defer cli.Close()
		resp, err := cli.Get(t.Context(), "ids/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 100 {
			t.Errorf("%s: %v keys (%v), want 100", when, resp, err)
		}
	}

	e.MustRun("down")
	e.MustRun("restore", "--force")
	e.MustRun("up")
	check("after the restore")

	second := harness.BackupNow(t, e)
	if second.ClusterID != first.ClusterID {
		t.Errorf("backup after the restore is of cluster %s, the one before of %s", second.ClusterID, first.ClusterID)
	}
	e.MustRun("down")
	// latest: the backup taken after the restore.
	if _, se, err := e.Run("restore", "--force"); err != nil || !strings.Contains(se, second.ID) {
		t.Errorf("restore (latest) after the restore: %v, want it to use %s\n%s", err, second.ID, se)
	}
	// The backup from before the first restore is of the same cluster.
	e.MustRun("restore", "--force", "--backup", first.ID)
	e.MustRun("up")
	check("after restoring the backup from before the first restore")

	// Every data dir lost: the IDs come from the backup's members.
	e.MustRun("down")
	for _, m := range e.Spec().Members {
		if err := os.RemoveAll(spec.Path(e.Dir, m.DataDir)); err != nil {
			t.Fatal(err)
		}
	}
	e.MustRun("restore")
	e.MustRun("up")
	check("after restoring with every data dir lost")
}
