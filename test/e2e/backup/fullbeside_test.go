package backup_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestDeltasWhileFullFails: the backup leader takes its full snapshots
// beside the recorder. With maxDeltasPerFull 3, the chain is soon due a
// full, and every full fails (its scratch directory DIR/tmp is made a
// file): the deltas go on all the while, BackupReady says
// FullBackupFailed, and the first full's chain restores every write made
// meanwhile. Once the scratch directory is back, a full is taken and
// BackupReady is True again. Before the fix, a due full ran before the
// recorder, so while it kept failing no delta was recorded (the wait for
// the writes to be backed up timed out).
func TestDeltasWhileFullFails(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.MaxDeltasPerFull = 3
		s.Backup.Retention = spec.Retention{KeepLast: 1000}
	})
	e.MustRun("up")
	cli := e.Client()
	defer cli.Close()

	harness.WaitBackedUp(t, e, putOne(t, cli, "before"))
	var first backup.Manifest
	harness.Eventually(t, 60*time.Second, 100*time.Millisecond, "the first full backup", func() error {
		for _, m := range harness.ListBackups(t, e) {
			if m.Kind == backup.KindFull {
				first = m
				return nil
			}
		}
		return fmt.Errorf("no full backup yet")
	})

	// Every full snapshot fails from now on: its scratch directory is a file.
	tmp := filepath.Join(e.Dir, "tmp")
	if err := os.Rename(tmp, tmp+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var rev int64
	for i := range 10 {
		k := fmt.Sprintf("during/%02d", i)
		keys = append(keys, k)
		rev = putOne(t, cli, k)
		// One delta each: the chain is past maxDeltasPerFull after three.
		harness.WaitBackedUpWithin(t, e, rev, 30*time.Second, 50*time.Millisecond)
	}
	e.WaitStatus(30*time.Second, "BackupReady FullBackupFailed", func(st *status.Status) bool {
		return harness.Cond(st, status.CondBackupReady).Reason == "FullBackupFailed"
	})
	for _, m := range harness.ListBackups(t, e) {
		if m.Kind == backup.KindFull && m.ID != first.ID {
			t.Fatalf("full backup %s stored while every full should fail", m.ID)
		}
	}

	// The scratch directory back: the next attempt stores a full snapshot.
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp+".aside", tmp); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 90*time.Second, 250*time.Millisecond, "a full snapshot after the scratch directory is back", func() error {
		for _, m := range harness.ListBackups(t, e) {
			if m.Kind == backup.KindFull && m.ID != first.ID && m.EndRevision >= rev {
				return nil
			}
		}
		return fmt.Errorf("no new full backup at revision %d or later yet", rev)
	})
	e.WaitStatus(30*time.Second, "BackupReady True", func(st *status.Status) bool {
		return harness.Cond(st, status.CondBackupReady).Status == "True"
	})

	// The deltas recorded while the fulls failed restore every write.
	cli.Close()
	e.MustRun("down")
	e.MustRun("restore", "--backup", first.ID, "--to-revision", fmt.Sprint(rev), "--force")
	e.MustRun("up")
	c := e.Client()
	defer c.Close()
	if have := hasKeys(t, c, keys...); len(have) != len(keys) {
		t.Fatalf("restored from %s to revision %d: keys %v, want %v", first.ID, rev, have, keys)
	}
}

// TestSpecChangeStartsRound: a backup round lasts while leadership does
// (fulls are taken beside the recorder, so none ends it), and reads its
// settings once: a spec saved meanwhile (here another backup directory)
// ends the round, and the next records with the new settings. Before the
// fix the round went on writing to the old directory for as long as its
// member led.
func TestSpecChangeStartsRound(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.Retention = spec.Retention{KeepLast: 1000}
	})
	e.MustRun("up")
	cli := e.Client()
	defer cli.Close()
	harness.WaitBackedUp(t, e, putOne(t, cli, "before"))

	s := e.Spec()
	moved := filepath.Join(e.Dir, "backups-moved")
	s.Backup.Store = moved
	if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	rev := putOne(t, cli, "after")
	// backup list reads the store the spec names now: the new directory.
	harness.WaitBackedUpWithin(t, e, rev, 60*time.Second, 250*time.Millisecond)
	var full bool
	for _, m := range harness.ListBackups(t, e) {
		full = full || m.Kind == backup.KindFull
	}
	if !full {
		t.Fatalf("no full backup in %s: the new store's chain has no base", moved)
	}
}
