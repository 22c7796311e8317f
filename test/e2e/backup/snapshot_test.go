package backup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// snapEtcd is a one-member etcd the test runs itself from the binary
// store, with plain flags and plain HTTP: no Steward involved.
type snapEtcd struct {
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startSnapEtcd runs etcd version v as member name (peer URL peer) on
// dataDir, a new cluster of one, until the test ends, and waits until it
// serves a linearizable read.
func startSnapEtcd(t *testing.T, e *harness.Env, v, dataDir, name, peer string) *snapEtcd {
	t.Helper()
	port, err := spec.FreePort("127.0.0.1")()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	logf, err := os.Create(dataDir + ".log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(e.Store, "etcd-v"+v, "etcd"),
		"--name", name, "--data-dir", dataDir,
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", name+"="+peer)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &snapEtcd{URL: url, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	cli := s.client(t)
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "etcd "+name+" to serve", func() error {
		select {
		case <-s.done:
			b, _ := os.ReadFile(dataDir + ".log")
			return fmt.Errorf("etcd exited: %s", harness.LastLines(string(b), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "health")
		return err
	})
	return s
}

func (s *snapEtcd) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.URL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (s *snapEtcd) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// freePeerURL returns an unused local peer URL.
func freePeerURL(t *testing.T) string {
	t.Helper()
	port, err := spec.FreePort("127.0.0.1")()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// TestRestoreFromEtcdctlSnapshot: a snapshot `etcdctl snapshot save` took
// of a plain etcd 3.5 (the oldest test version) that Steward never ran
// becomes a three-member Steward cluster (the next version) with `restore
// --from-snapshot`: the same keyspace, keys with their revisions and
// leases, and the revision bumped above anything the old cluster served.
// A copy with one byte flipped, and store options given with the file,
// are refused with one error each, and nothing changes.
func TestRestoreFromEtcdctlSnapshot(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	from, to := vs[0], vs[1]
	e := harness.New(t)
	ctx := t.Context()

	// The foreign cluster, its data and its snapshot.
	src := startSnapEtcd(t, e, from, filepath.Join(e.Dir, "foreign"), "foreign", freePeerURL(t))
	scli := src.client(t)
	loadMixed(t, scli, 2000)
	snap := filepath.Join(e.Dir, "foreign.snapshot")
	if out, err := exec.CommandContext(ctx, filepath.Join(e.Store, "etcd-v"+from, "etcdctl"),
		"--endpoints", src.URL, "snapshot", "save", snap).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	want := workload.TakeDigest(t, scli, "", 0)
	if want.Keys < 1500 {
		t.Fatalf("the foreign cluster holds %s; want the load's keys", want)
	}

	// The Steward cluster, with data of its own, stopped.
	e.Up(3, to)
	cli := e.Client()
	seen := putKeys(t, cli, "mine/", 100)
	cli.Close()
	e.MustRun("down")
	dataDir := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	before, _ := os.ReadDir(filepath.Join(dataDir, "member"))
	unchanged := func(what string) {
		t.Helper()
		after, _ := os.ReadDir(filepath.Join(dataDir, "member"))
		if len(before) == 0 || len(after) != len(before) {
			t.Errorf("%s changed the data dir: %v -> %v", what, before, after)
		}
		if aside, _ := filepath.Glob(filepath.Join(e.Dir, "members", "*", "data.pre-restore-*")); len(aside) > 0 {
			t.Errorf("%s moved data aside: %v", what, aside)
		}
		if tmp, _ := filepath.Glob(filepath.Join(e.Dir, "tmp-restore-*")); len(tmp) > 0 {
			t.Errorf("%s left %v", what, tmp)
		}
	}

	good, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(e.Dir, "flipped.snapshot")
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x01
	if err := os.WriteFile(bad, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	out := e.MustFail("restore", "--from-snapshot", bad, "--force")
	if !strings.Contains(out, backup.ErrSnapshotHash.Error()) || strings.Count(out, "Error:") != 1 {
		t.Errorf("restore of a snapshot with a byte flipped: want one error saying %q:\n%s", backup.ErrSnapshotHash, out)
	}
	unchanged("a refused snapshot file")
	out = e.MustFail("restore", "--from-snapshot", snap, "--force", "--to-revision", "5")
	if !strings.Contains(out, "a snapshot file restores the one revision it holds") || !strings.Contains(out, "--to-revision") {
		t.Errorf("restore of a snapshot file with --to-revision: %s", out)
	}
	unchanged("a snapshot file with --to-revision")

	_, stderr, err := e.Run("restore", "--from-snapshot", snap, "--force")
	if err != nil {
		t.Fatalf("restore --from-snapshot: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "from snapshot file "+snap) {
		t.Errorf("restore does not say what it restored from:\n%s", stderr)
	}
	if after, _ := os.ReadFile(snap); string(after) != string(good) {
		t.Error("restore changed the snapshot file")
	}
	e.MustRun("up")
	cli = e.Client()
	got := workload.TakeDigest(t, cli, "", 0)
	workload.RequireEqual(t, "the Steward cluster restored from the foreign snapshot", got, want)
	if min := want.Rev + restore.DefaultBumpRevision; got.Head < min {
		t.Errorf("restored revision %d: want it bumped to at least %d (the snapshot's %d + %d)", got.Head, min, want.Rev, restore.DefaultBumpRevision)
	}
	if got.Head <= seen {
		t.Errorf("restored revision %d is not above %d, a revision the Steward cluster served", got.Head, seen)
	}
	if r, err := cli.Get(ctx, "mine/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("the Steward cluster's own keys after the restore: %v %v, want none", r, err)
	}
	// The new timeline's record names the cluster ID the restore kept
	// (before: empty, as a snapshot file names no backup).
	var rec backup.TimelineRecord
	b, err := os.ReadFile(filepath.Join(e.Spec().BackupStoreDir(e.Dir), backup.TimelineObject(2)))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	st, serr := cli.Status(ctx, cli.Endpoints()[0])
	if serr != nil {
		t.Fatal(serr)
	}
	if cid := fmt.Sprintf("%x", st.Header.ClusterId); err != nil || rec.ClusterID != cid {
		t.Errorf("timeline 2's record %+v (%v): want the cluster ID kept, %s", rec, err, cid)
	}
}

// TestBackupExportEtcdutl: a Steward cluster with continuous backups; a
// full backup and the deltas after it exported at a revision between
// them; `etcdutl snapshot restore` (which checks the appended SHA-256)
// builds a data dir from the file, and a plain etcd started on it holds
// the source's keyspace at that revision. The export is 0600 and never
// replaces a file; a delta exports at its own end revision.
func TestBackupExportEtcdutl(t *testing.T) {
	t.Parallel()
	v := harness.Versions()[1]
	e := harness.New(t)
	e.Up(1, v)
	cli := e.Client()
	loadMixed(t, cli, 1000)
	full := harness.BackupNow(t, e)
	putKeys(t, cli, "more/", 300)
	r, err := cli.Delete(t.Context(), "more/00007")
	if err != nil {
		t.Fatal(err)
	}
	target := r.Header.Revision
	want := workload.TakeDigest(t, cli, "", target)
	last := putKeys(t, cli, "later/", 100)
	harness.WaitBackedUp(t, e, last)

	file := filepath.Join(e.Dir, "export.snapshot")
	var res restore.Exported
	if err := json.Unmarshal([]byte(e.MustRun("backup", "export", full.ID, "--to", file, "--to-revision", fmt.Sprint(target), "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Backup != full.ID || res.Deltas < 1 || res.Revision != target || res.File != file {
		t.Fatalf("export = %+v; want backup %s with deltas, revision %d, file %s", res, full.ID, target, file)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != res.Size {
		t.Fatalf("exported file: %v %v; want mode 0600 and %d bytes", fi, err, res.Size)
	}
	// An existing file is never replaced.
	exported, _ := os.ReadFile(file)
	if out := e.MustFail("backup", "export", full.ID, "--to", file); !strings.Contains(out, "never replaces a file") {
		t.Errorf("export over an existing file: %s", out)
	}
	if again, _ := os.ReadFile(file); string(again) != string(exported) {
		t.Error("a refused export changed the existing file")
	}
	// A delta exports at its own end revision: the newest, which ends
	// after the full backup.
	var delta backup.Manifest
	for _, m := range harness.ListBackups(t, e) {
		if m.Kind == backup.KindDelta && m.EndRevision > full.EndRevision {
			delta = m
		}
	}
	if delta.ID == "" {
		t.Fatal("no delta after the full backup")
	}
	var dres restore.Exported
	if err := json.Unmarshal([]byte(e.MustRun("backup", "export", delta.ID, "--to", filepath.Join(e.Dir, "delta.snapshot"), "-o", "json")), &dres); err != nil {
		t.Fatal(err)
	}
	if dres.Revision != delta.EndRevision || dres.Backup != full.ID {
		t.Errorf("export of delta %s = %+v; want revision %d from %s", delta.ID, dres, delta.EndRevision, full.ID)
	}

	// etcd's own tools take it.
	dataDir, peer := filepath.Join(e.Dir, "from-export"), freePeerURL(t)
	if out, err := exec.CommandContext(t.Context(), filepath.Join(e.Store, "etcd-v"+v, "etcdutl"), "snapshot", "restore", file,
		"--data-dir", dataDir, "--name", "plain", "--initial-cluster", "plain="+peer,
		"--initial-advertise-peer-urls", peer).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore of the export: %v\n%s", err, out)
	}
	plain := startSnapEtcd(t, e, v, dataDir, "plain", peer)
	got := workload.TakeDigest(t, plain.client(t), "", target)
	workload.RequireEqual(t, "plain etcd on the exported backup", got, want)
	if r, err := plain.client(t).Get(t.Context(), "later/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("keys written after the export's revision: %v %v, want none", r, err)
	}
}
