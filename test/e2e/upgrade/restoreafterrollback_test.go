package upgrade_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestRestoreAfterRollback: three members go 3.6 -> 3.7 -> back to 3.6
// (`rollback`, etcd's online downgrade) under writes; the newest full
// backup is then the one 3.7 took, whose database has storage version
// 3.7, which etcd 3.6 refuses to start on ("version 3.7.0 is not
// supported"). Right after the rollback, `recover` (every member's data
// lost) and then `restore` of that backup give a healthy cluster on 3.6
// holding every acknowledged write: the restore lowers the storage and
// cluster versions as etcd's downgrade does. The same backup into 3.5 (two
// minors older) is refused before anything changes, naming a backup that
// 3.5 can start on. `inspect storage-versions --backup` reads the full
// snapshot recover took after its restore (the restore's marker record in
// it).
func TestRestoreAfterRollback(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	e := harness.New(t)
	e.WriteSpec(3, vs[1], func(s *spec.Cluster) {
		s.Etcd.ExtraFlags = map[string]string{"experimental-downgrade-check-time": "1h"}
		// No scheduled full snapshot (the default is hourly, on the
		// hour): one the 3.6 members took after the rollback would be
		// the newest, and the backup this test restores is the one 3.7
		// took.
		s.Backup.FullSchedule = "0 0 1 1 *"
	})
	e.MustRun("up")
	w := harness.UnderWrites(t, e.Client(), workload.Options{Prefix: "rb"}, harness.Expect{})
	e.MustRun("upgrade", "apply", "--to", vs[2])
	e.WaitStatus(time.Minute, "every member on "+vs[2], harness.Healthy)
	harness.Eventually(t, time.Minute, 100*time.Millisecond, "writes on "+vs[2], w.RevAbove(w.MaxRev()+50))
	e.MustRun("rollback")
	st := e.WaitStatus(time.Minute, "every member back on "+vs[1], harness.Healthy)
	harness.RequireVersion(t, st, vs[1], "after the rollback")
	res := w.Finish(t)
	harness.WaitBackedUp(t, e, res.MaxRev)
	var newer backup.Manifest
	for _, m := range harness.ListBackups(t, e) {
		if m.Kind == backup.KindFull {
			newer = m
		}
	}
	if harness.Minor(newer.EtcdVersion) != harness.Minor(vs[2]) {
		t.Fatalf("the newest full backup after the rollback is %s, taken by etcd %s; want one %s took", newer.ID, newer.EtcdVersion, vs[2])
	}
	end := int64(0)
	for _, m := range harness.ListBackups(t, e) {
		end = max(end, m.EndRevision)
	}

	if !t.Run("recover from the backup "+vs[2]+" took", func(t *testing.T) {
		e := e.For(t)
		e.KillAll()
		for _, m := range e.Spec().Members {
			if err := os.RemoveAll(filepath.Join(e.Dir, m.DataDir, "member", "wal")); err != nil {
				t.Fatal(err)
			}
		}
		rep, out := harness.RecoverJSON(t, e)
		if rep.Action != "restore" || rep.RestoredFrom != newer.ID {
			t.Fatalf("recover: action %q from %q, want a restore from %s: %s", rep.Action, rep.RestoredFrom, newer.ID, out)
		}
		st := e.WaitStatus(time.Minute, "healthy after the recovery", harness.Healthy)
		harness.RequireVersion(t, st, vs[1], "after the recovery")
		cli := e.Client()
		workload.RequireKeys(t, cli, res)
		cli.Close()
		// The fresh full snapshot holds the empty record the restore wrote
		// at the bumped revision: inspect reads it as backup verify does.
		if rep.FreshBackup == "" {
			t.Fatalf("recover took no fresh full snapshot: %s", out)
		}
		e.MustRun("backup", "verify", rep.FreshBackup)
		e.MustRun("inspect", "storage-versions", "--backup", rep.FreshBackup)
	}) {
		return
	}
	if !t.Run("restore of the backup "+vs[2]+" took", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("down")
		args := []string{"restore", "--force", "--backup", newer.ID, "--to-revision", fmt.Sprint(end)}
		so, se, err := e.Run(args...)
		if err != nil {
			t.Fatalf("steward %s: %v\n%s%s", strings.Join(args, " "), err, so, se)
		}
		if want := "lowered it to " + harness.Minor(vs[1]) + ".0"; !strings.Contains(se, want) {
			t.Errorf("restore of a %s backup into %s does not say %q:\n%s", vs[2], vs[1], want, se)
		}
		e.MustRun("up")
		st := e.WaitStatus(time.Minute, "healthy after the restore", harness.Healthy)
		harness.RequireVersion(t, st, vs[1], "after the restore")
		cli := e.Client()
		workload.RequireKeys(t, cli, res)
		cli.Close()
	}) {
		return
	}
	t.Run("the same backup into "+vs[0]+": refused", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("down")
		s := e.Spec()
		s.Version = vs[0]
		if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
			t.Fatal(err)
		}
		before, _ := filepath.Glob(filepath.Join(e.Dir, "members", "*", "data*"))
		// The refusal comes before the new timeline is recorded: no
		// timeline number is taken (recover and restore above took 2 and 3).
		timelines := filepath.Join(s.BackupStoreDir(e.Dir), "timelines", "*.json")
		tlBefore, _ := filepath.Glob(timelines)
		out := e.MustFail("restore", "--force", "--backup", newer.ID)
		t.Logf("refused: %s", out)
		for _, want := range []string{"refusing to restore " + newer.ID, "storage version " + harness.Minor(vs[2]) + ".0", "etcd " + vs[0], "restore backup ", "name the older backup with --backup ID"} {
			if !strings.Contains(out, want) {
				t.Errorf("refusal does not say %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "tmp-restore-") {
			t.Errorf("refusal names the restore's temporary file:\n%s", out)
		}
		after, _ := filepath.Glob(filepath.Join(e.Dir, "members", "*", "data*"))
		if len(after) != len(before) {
			t.Errorf("a refused restore changed the data dirs: %v, then %v", before, after)
		}
		if tlAfter, _ := filepath.Glob(timelines); len(tlBefore) < 2 || len(tlAfter) != len(tlBefore) {
			t.Errorf("timelines in the store: %v before the refused restore, then %v (want the two the recover and the restore began, unchanged)", tlBefore, tlAfter)
		}
	})
}
