package backup_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/test/harness"
)

// TestKilledRestoreLeavesLatest (issue 26, timelines): a cluster never
// restored starts a restore to an early revision, killed after its
// prepare recorded timeline 2 in the store (crash point restore-staged:0:
// the spec is unchanged). Timeline 2 is abandoned: `--timeline 2` is
// refused (also after), and the next plain restore restores timeline 1's newest point,
// with every acknowledged write, on timeline 3, which it marks committed
// in the store with the cluster ID kept. Before the fix, the plain
// restore took timeline 2 as current and restored its branch point (the
// early revision), silently leaving out the later writes.
func TestKilledRestoreLeavesLatest(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	putKeys(t, cli, "early/", 50)
	early := harness.BackupNow(t, e)
	putKeys(t, cli, "late/", 50)
	harness.BackupNow(t, e)
	st, err := cli.Status(t.Context(), cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	clusterID := fmt.Sprintf("%x", st.Header.ClusterId)
	cli.Close()
	e.MustRun("down")

	point := crashpoint.Indexed(crashpoint.RestoreStaged, 0)
	_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "restore", "--force", "--to-revision", fmt.Sprint(early.EndRevision))
	if err == nil || !strings.Contains(se, "crashpoint: "+point) {
		t.Fatalf("restore with %s: %v, want it killed there\n%s", point, err, se)
	}
	store := e.Spec().BackupStoreDir(e.Dir)
	// The commit marker's name (stable: docs/backup.md).
	marker := func(n int) string { return fmt.Sprintf("timelines/%08d.committed", n) }
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(store, name))
		return err == nil
	}
	if !exists(backup.TimelineObject(2)) || exists(marker(2)) {
		t.Fatalf("after the kill: want timeline 2's record in the store and no commit marker")
	}

	_, se, err = e.Run("restore", "--force")
	if err != nil {
		t.Fatalf("restore after the killed one: %v\n%s", err, se)
	}
	if !strings.Contains(se, "left out timelines 2") || !strings.Contains(se, "on a new timeline 3") {
		t.Errorf("restore did not say it left out timeline 2 and began timeline 3:\n%s", se)
	}
	if !exists(marker(3)) {
		t.Errorf("timeline 3 is not marked committed in the store")
	}
	b, err := os.ReadFile(filepath.Join(store, backup.TimelineObject(3)))
	if err != nil {
		t.Fatal(err)
	}
	var rec backup.TimelineRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.ParentTimeline != 1 || rec.ClusterID != clusterID {
		t.Errorf("timeline 3's record %+v (%v): want parent 1 and cluster ID %s", rec, err, clusterID)
	}

	e.MustRun("up")
	cli = e.Client()
	for _, prefix := range []string{"early/", "late/"} {
		resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 50 {
			t.Errorf("%s keys after the restore: %v (%v), want 50", prefix, resp, err)
		}
	}
	cli.Close()
	e.MustRun("down")

	// Still abandoned once the cluster is on timeline 3.
	out := e.MustFail("restore", "--force", "--timeline", "2")
	if !strings.Contains(out, "abandoned timeline 2") || !strings.Contains(out, fmt.Sprintf("timeline 1 at revision %d", early.EndRevision)) || strings.Count(out, "Error:") != 1 {
		t.Errorf("restore --timeline 2 (abandoned): want one refusal naming it and its starting point:\n%s", out)
	}
}
