package backup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/test/harness"
)

// TestInterruptedRestoreCommitRefusesUp: a restore killed in its commit
// after the first member's restored data dir is in place (crash point
// restore-committed:0) leaves one member restored and two on their old
// data dirs, of the same cluster ID. `steward up` refuses, naming the
// interrupted restore and how to finish it, and starts no member; the
// restore run again finishes it (and removes the marker); `up` then
// serves every acknowledged write of the backup. Before the fix, `up`
// started the mixed members together.
func TestInterruptedRestoreCommitRefusesUp(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	cli := e.Client()
	putKeys(t, cli, "k/", 100)
	harness.BackupNow(t, e)
	cli.Close()
	e.MustRun("down")

	point := crashpoint.Indexed(crashpoint.RestoreCommitted, 0)
	_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "restore", "--force")
	if err == nil || !strings.Contains(se, "crashpoint: "+point) {
		t.Fatalf("restore with %s: %v, want it killed there\n%s", point, err, se)
	}
	marker := cluster.RestorePendingPath(e.Dir)
	if fi, err := os.Stat(marker); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after the kill: marker %s: %v, want it, 0600", marker, err)
	}

	se = e.MustFail("up")
	if !strings.Contains(se, "stopped while putting the restored data dirs") || !strings.Contains(se, "run steward restore --force again (the same options) to finish it") {
		t.Errorf("up after the interrupted restore: want the refusal and its advice, got:\n%s", se)
	}
	if pids := memberProcesses(e.Dir); len(pids) > 0 {
		t.Fatalf("up refused yet member processes run: %v", pids)
	}

	if _, se, err := e.Run("restore", "--force"); err != nil {
		t.Fatalf("restore run again: %v\n%s", err, se)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("marker after the restore finished: %v, want it gone", err)
	}
	e.MustRun("up")
	e.WaitStatus(2*time.Minute, "healthy after the restore", harness.Healthy)
	cli = e.Client()
	resp, err := cli.Get(t.Context(), "k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 100 {
		t.Errorf("keys after the restore: %v (%v), want 100", resp, err)
	}
	cli.Close()
	e.MustRun("down")
}

// memberProcesses returns the pids of live processes started with a data
// dir under dir.
func memberProcesses(dir string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(a, "--data-dir="+dir+string(filepath.Separator)) {
				pids = append(pids, fmt.Sprintf("%s (%s)", d.Name(), a))
			}
		}
	}
	return pids
}
