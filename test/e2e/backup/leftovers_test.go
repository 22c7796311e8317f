package backup_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/test/harness"
)

func leftovers(t *testing.T, e *harness.Env, args ...string) restore.Leftovers {
	t.Helper()
	var l restore.Leftovers
	out := e.MustRun(append([]string{"restore", "leftovers", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("restore leftovers: %v\n%s", err, out)
	}
	return l
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRestoreLeftovers (issue 26, deliverable 5): a restore killed after
// staging two members' data dirs (crash point restore-staged:1) leaves
// them and its temporary snapshot, changes no data dir, and the next
// restore removes both and restores; `restore leftovers` lists the kept
// copies with their sizes, a prune keeps the newest copy of each member
// (--keep), refuses while a restore holds the restore lock (and a restore
// refuses then too), and the cluster runs on afterwards. Before the fix,
// the staged dirs stayed forever and nothing listed or pruned the
// pre-restore copies.
func TestRestoreLeftovers(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	cli := e.Client()
	putKeys(t, cli, "left/", 200)
	cli.Close()
	harness.BackupNow(t, e)
	e.MustRun("down")

	point := crashpoint.Indexed(crashpoint.RestoreStaged, 1)
	_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "restore", "--force")
	if err == nil || !strings.Contains(se, "crashpoint: "+point) {
		t.Fatalf("restore with %s: %v, want it killed there\n%s", point, err, se)
	}
	staged := glob(t, filepath.Join(e.Dir, "members", "*", "data.restoring-*Z"))
	if len(staged) != 2 {
		t.Fatalf("staged data dirs after the kill: %v, want 2", staged)
	}
	if tmp := glob(t, filepath.Join(e.Dir, "tmp-restore-*")); len(tmp) != 1 {
		t.Errorf("temporary snapshot dirs after the kill: %v, want 1", tmp)
	}
	if aside := glob(t, filepath.Join(e.Dir, "members", "*", "data.pre-restore-*Z")); len(aside) != 0 {
		t.Errorf("a restore killed before its commit moved data dirs aside: %v", aside)
	}
	l := leftovers(t, e)
	if len(l.Copies) != 2 || l.Bytes <= 0 {
		t.Errorf("leftovers after the kill: %+v, want the 2 staged dirs with their sizes", l)
	}
	for _, c := range l.Copies {
		if c.Kind != datadir.KindRestoring || c.Action != "remove" || c.Bytes <= 0 || !slices.Contains(staged, c.Path) {
			t.Errorf("leftover %+v: want a staged dir marked remove", c)
		}
	}

	// The next restore removes them (and the killed one's snapshot).
	_, se, err = e.Run("restore", "--force")
	if err != nil {
		t.Fatalf("restore after the kill: %v\n%s", err, se)
	}
	if !strings.Contains(se, "3 copies of data dirs are kept aside on this machine") {
		t.Errorf("restore did not say how much its kept copies take:\n%s", se)
	}
	for _, s := range staged {
		if !strings.Contains(se, "removed "+s) {
			t.Errorf("restore did not say it removed %s:\n%s", s, se)
		}
	}
	if s := glob(t, filepath.Join(e.Dir, "members", "*", "data.restoring-*Z")); len(s) != 0 {
		t.Errorf("staged data dirs left after the next restore: %v", s)
	}
	if tmp := glob(t, filepath.Join(e.Dir, "tmp-restore-*")); len(tmp) != 0 {
		t.Errorf("temporary snapshot dirs left after the next restore: %v", tmp)
	}
	first := glob(t, filepath.Join(e.Dir, "members", "*", "data.pre-restore-*Z"))
	if len(first) != 3 {
		t.Fatalf("pre-restore copies: %v, want 3", first)
	}
	e.MustRun("restore", "--force")
	all := glob(t, filepath.Join(e.Dir, "members", "*", "data.pre-restore-*Z"))
	if len(all) != 6 {
		t.Fatalf("pre-restore copies after a second restore: %v, want 6", all)
	}
	l = leftovers(t, e)
	var remove, keep []string
	for _, c := range l.Copies {
		if c.Kind != datadir.KindPreRestore || c.Bytes <= 0 {
			t.Errorf("leftover %+v: want a pre-restore copy with its size", c)
		}
		switch c.Action {
		case "remove":
			remove = append(remove, c.Path)
		case "keep":
			keep = append(keep, c.Path)
		}
	}
	slices.Sort(remove)
	if !slices.Equal(remove, first) || len(keep) != 3 || l.Reclaim <= 0 || l.Reclaim >= l.Bytes {
		t.Errorf("a prune would remove %v and keep %v (reclaiming %d of %d), want the older copies %v removed and the newest of each member kept",
			remove, keep, l.Reclaim, l.Bytes, first)
	}
	if l := leftovers(t, e, "--keep", "2"); l.Reclaim != 0 {
		t.Errorf("--keep 2 with two copies per member would reclaim %d", l.Reclaim)
	}

	// Refused while a restore holds the lock: nothing removed, and a
	// restore refused meanwhile.
	lock, err := filelock.TryLock(filepath.Join(e.Dir, "run", "restore.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if out := e.MustFail("restore", "leftovers", "--prune"); !strings.Contains(out, "another steward process is restoring") {
		t.Errorf("prune while a restore runs: %s", out)
	}
	if out := e.MustFail("restore", "--force"); !strings.Contains(out, "another steward process is restoring") {
		t.Errorf("restore while another runs: %s", out)
	}
	lock.Release()
	if out := e.MustFail("restore", "leftovers", "--prune", "--keep", "0"); !strings.Contains(out, "--keep") {
		t.Errorf("--keep 0: %s", out)
	}
	if n := len(glob(t, filepath.Join(e.Dir, "members", "*", "data.pre-restore-*Z"))); n != 6 {
		t.Fatalf("a refused prune left %d copies, want 6", n)
	}

	pruned := leftovers(t, e, "--prune")
	if pruned.Reclaim != l.Reclaim {
		t.Errorf("prune freed %d, the listing said %d", pruned.Reclaim, l.Reclaim)
	}
	left := glob(t, filepath.Join(e.Dir, "members", "*", "data.pre-restore-*Z"))
	slices.Sort(keep)
	if !slices.Equal(left, keep) {
		t.Errorf("after the prune: %v, want the newest of each member %v", left, keep)
	}
	for _, k := range keep {
		if f := datadir.Check(k); f.State != datadir.Valid {
			t.Errorf("kept copy %s: %v", k, f)
		}
	}
	// Pruning again removes nothing: the newest copy is never removed.
	if again := leftovers(t, e, "--prune"); again.Reclaim != 0 || len(again.Copies) != 3 {
		t.Errorf("second prune: %+v", again)
	}

	e.MustRun("up")
	cli = e.Client()
	defer cli.Close()
	resp, err := cli.Get(t.Context(), "left/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 200 {
		t.Fatalf("after the restores and the prune: %v keys (%v), want 200", resp, err)
	}
}
