package backup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

func putKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for i := 0; i < n; i += 50 {
		var ops []clientv3.Op
		for j := i; j < i+50 && j < n; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%05d", prefix, j), fmt.Sprintf("value-%d", j)))
		}
		resp, err := cli.Txn(t.Context()).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// TestBackupRestore, for each version: an encrypted full backup records the
// revision it holds; verify catches a missing or wrong key; restore refuses
// a running cluster and existing data (without --force), then rebuilds every
// member with revisions bumped past anything a client saw and the old range
// compacted. For the second version the backup is stored without
// compression (backup.compression none), and restores the same.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	for i, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			compression := backup.CompressionFastest
			if i == 1 {
				compression = backup.CompressionNone
			}
			e.WriteSpec(3, v, func(s *spec.Cluster) { s.Backup.Compression = compression })
			e.MustRun("up")
			cli := e.Client()
			ctx := t.Context()
			rev := putKeys(t, cli, "backup/", 500)
			key := filepath.Join(e.Dir, "backup.key")
			if _, err := backup.GenerateKeyFile(key); err != nil {
				t.Fatal(err)
			}
			m := harness.BackupNow(t, e, "--key-file", key)
			st := e.Status()
			if m.EndRevision != rev || m.ClusterID != st.Cluster.ID || m.Member != st.Cluster.Leader ||
				m.Encryption != "aes-256-gcm" || m.KeyID == "" || m.EtcdVersion != v {
				t.Fatalf("manifest %+v: want revision %d, cluster %s, leader %s, encrypted, etcd %s", m, rev, st.Cluster.ID, st.Cluster.Leader, v)
			}
			wantObject := map[string]string{backup.CompressionFastest: "zstd", backup.CompressionNone: "none"}[compression]
			if m.Compression != wantObject || strings.Contains(m.Object, ".zst") != (compression != backup.CompressionNone) {
				t.Fatalf("backup.compression %s: manifest compression %q, object %s", compression, m.Compression, m.Object)
			}
			e.WaitStatus(30*time.Second, "BackupReady", func(st *status.Status) bool {
				c := harness.Cond(st, status.CondBackupReady)
				return c.Status == "True" && c.Reason == "IncrementalBackupSucceeded"
			})
			fi, err := os.Stat(filepath.Join(e.Dir, "backups", m.Object))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("backup object mode: %v %v, want 0600", fi, err)
			}

			e.MustRun("backup", "verify", m.ID, "--key-file", key)
			if out := e.MustFail("backup", "verify", m.ID); !strings.Contains(out, "is encrypted") {
				t.Errorf("verify without key: %s", out)
			}
			wrong := filepath.Join(e.Dir, "wrong.key")
			if _, err := backup.GenerateKeyFile(wrong); err != nil {
				t.Fatal(err)
			}
			if out := e.MustFail("backup", "verify", m.ID, "--key-file", wrong); !strings.Contains(out, "wrong key") {
				t.Errorf("verify with wrong key: %s", out)
			}

			after, err := cli.Put(ctx, "after/backup", "lost-by-full-restore")
			if err != nil {
				t.Fatal(err)
			}
			seen := after.Header.Revision
			if out := e.MustFail("restore", "--key-file", key); !strings.Contains(out, "stop the cluster first") {
				t.Errorf("restore while running: %s", out)
			}
			cli.Close()
			e.MustRun("down")
			if out := e.MustFail("restore", "--key-file", key); !strings.Contains(out, "data dirs hold data") {
				t.Errorf("restore over data: %s", out)
			}
			// Continuous backups recorded the later write too; restoring to
			// the backup's revision leaves it out.
			e.MustRun("restore", "--backup", m.ID, "--to-revision", fmt.Sprint(m.EndRevision), "--key-file", key, "--force")
			aside, _ := filepath.Glob(filepath.Join(e.Dir, "members", "*", "data.pre-restore-*"))
			if len(aside) < 3 {
				t.Errorf("old data dirs not kept aside: %v", aside)
			}
			e.MustRun("up")
			cli = e.Client()
			resp, err := cli.Get(ctx, "backup/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if resp.Count != 500 {
				t.Errorf("restored %d keys, want 500", resp.Count)
			}
			if resp.Header.Revision <= seen {
				t.Errorf("restored revision %d is not above %d, a revision a client saw", resp.Header.Revision, seen)
			}
			if r, _ := cli.Get(ctx, "after/backup"); r.Count != 0 {
				t.Errorf("a key written after the backup exists after restoring it")
			}
			// A watcher resuming from a revision it saw gets a compaction
			// error, not a silent gap.
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wr := <-cli.Watch(wctx, "backup/", clientv3.WithPrefix(), clientv3.WithRev(seen))
			if !errors.Is(wr.Err(), rpctypes.ErrCompacted) {
				t.Errorf("watch from revision %d after restore: %v, want a compaction error", seen, wr.Err())
			}
		})
	}
}

// TestBackupBadInput: corrupt and truncated backups are refused by verify
// and restore, and a refused restore changes no data dir. A backup restored
// into an older etcd minor than the one that took it runs on that etcd.
func TestBackupBadInput(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	newer, older := vs[1], vs[0]
	e := harness.New(t)
	e.Up(1, newer)
	putKeys(t, e.Client(), "k/", 100)
	m := harness.BackupNow(t, e)
	obj := filepath.Join(e.Dir, "backups", m.Object)
	good, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}

	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x40
	if err := os.WriteFile(obj, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := e.MustFail("backup", "verify", "--all"); !strings.Contains(out, "failed verification") {
		t.Errorf("verify of a bit-flipped backup: %s", out)
	}
	e.MustRun("down")
	dataDir := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	before, _ := os.ReadDir(filepath.Join(dataDir, "member"))
	if out := e.MustFail("restore", "--force"); !strings.Contains(out, "corrupt") {
		t.Errorf("restore of a bit-flipped backup: %s", out)
	}
	if err := os.WriteFile(obj, good[:len(good)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	if out := e.MustFail("restore", "--force"); !strings.Contains(out, "corrupt") {
		t.Errorf("restore of a truncated backup: %s", out)
	}
	after, _ := os.ReadDir(filepath.Join(dataDir, "member"))
	if len(before) == 0 || len(after) != len(before) {
		t.Errorf("a refused restore changed the data dir: %v -> %v", before, after)
	}
	if aside, _ := filepath.Glob(dataDir + ".pre-restore-*"); len(aside) > 0 {
		t.Errorf("a refused restore moved data aside: %v", aside)
	}
	if out := e.MustFail("restore", "--backup", "no-such-id"); !strings.Contains(out, `no backup "no-such-id"`) {
		t.Errorf("restore of an unknown backup: %s", out)
	}
	if err := os.WriteFile(obj, good, 0o600); err != nil {
		t.Fatal(err)
	}
	// A backup of another cluster is refused unless asked for.
	manPath := filepath.Join(e.Dir, "backups", "full", m.ID+".json")
	manBytes, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatal(err)
	}
	// Another cluster's manifest is under another cluster backup key: here
	// one without a MAC, trusted on purpose.
	var foreign map[string]any
	if err := json.Unmarshal(manBytes, &foreign); err != nil {
		t.Fatal(err)
	}
	foreign["clusterID"] = "abcdef0123456789"
	delete(foreign, "mac")
	delete(foreign, "macKeyID")
	delete(foreign, "format")
	fb, _ := json.Marshal(foreign)
	if err := os.WriteFile(manPath, fb, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := e.MustFail("restore", "--force", "--backup", m.ID, "--allow-unauthenticated"); !strings.Contains(out, "is from etcd cluster abcdef0123456789") {
		t.Errorf("restore of another cluster's backup: %s", out)
	}
	if err := os.WriteFile(manPath, manBytes, 0o600); err != nil {
		t.Fatal(err)
	}

	// The same backup, restored into a cluster of the older minor.
	o := harness.New(t)
	o.WriteSpec(1, older, func(s *spec.Cluster) {
		s.Backup.Store = filepath.Join(e.Dir, "backups")
	})
	// Another directory holds another cluster backup key: the backup is
	// trusted on purpose.
	o.MustRun("restore", "--allow-unauthenticated")
	o.MustRun("up")
	st := o.Status()
	if st.Members[0].Version != older || !harness.Healthy(st) {
		t.Fatalf("restored into %s: version %s healthy %v", older, st.Members[0].Version, harness.Healthy(st))
	}
	resp, err := o.Client().Get(t.Context(), "k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 100 {
		t.Fatalf("keys in the older cluster: %v %v", resp, err)
	}
}
