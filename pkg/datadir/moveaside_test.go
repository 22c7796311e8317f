package datadir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
)

// TestMoveAside: a data dir and its version record move to
// DATADIR.WHY-STAMP, nothing is deleted, and the parent dir is synced
// after the renames (so a power loss cannot undo a move the caller
// recorded). The fsync itself is not observable in a test: syncDir is
// swapped to see it called with the parent; before the fix it was not.
// Not parallel: it swaps a package variable.
func TestMoveAside(t *testing.T) {
	var synced []string
	real := syncDir
	syncDir = func(d string) error { synced = append(synced, d); return real(d) }
	t.Cleanup(func() { syncDir = real })
	parent := t.TempDir()
	dd := filepath.Join(parent, "data")
	if err := os.MkdirAll(filepath.Join(dd, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(RecordPath(dd), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst, err := MoveAside(dd, KindPreRestore)
	if err != nil || !strings.HasPrefix(dst, dd+".pre-restore-") {
		t.Fatalf("MoveAside = %q, %v", dst, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "member")); err != nil {
		t.Fatalf("the moved data dir: %v", err)
	}
	if _, err := os.Stat(RecordPath(dst)); err != nil {
		t.Fatalf("the moved version record: %v", err)
	}
	if _, err := os.Stat(dd); !os.IsNotExist(err) {
		t.Fatalf("the data dir is still there: %v", err)
	}
	if len(synced) != 1 || synced[0] != parent {
		t.Fatalf("synced %q, want the parent %s once", synced, parent)
	}
	if dst, err := MoveAside(dd, KindPreRestore); err != nil || dst != "" {
		t.Fatalf("MoveAside of nothing = %q, %v; want \"\"", dst, err)
	}
}

// crashHelperEnv tells TestHelperProcess what to run: "OP PATH [DIR]".
const crashHelperEnv = "DATADIR_TEST_CRASH"

// TestHelperProcess is not a test: run as a child by the kill tests, it
// runs MoveAside(PATH) or RemoveKept(PATH, DIR) with the crash point the
// parent armed, which kills it between the two operations.
func TestHelperProcess(t *testing.T) {
	args := strings.Fields(os.Getenv(crashHelperEnv))
	if len(args) < 2 {
		return
	}
	var err error
	switch args[0] {
	case "move-aside":
		_, err = MoveAside(args[1], KindPreRestore)
	case "remove-kept":
		err = RemoveKept(args[1], []string{filepath.Dir(args[1])})
	}
	fmt.Fprintln(os.Stderr, "not killed:", err)
	os.Exit(3)
}

// killedAt runs TestHelperProcess with op on path and point armed, and
// fails unless the child died by SIGKILL at that point.
func killedAt(t *testing.T, point, op, path string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+op+" "+path, crashpoint.EnvVar+"="+point)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want killed by SIGKILL\nstderr: %s", err, stderr.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL\nstderr: %s", ee, stderr.String())
	}
	if want := "crashpoint: " + point + "\n"; stderr.String() != want {
		t.Fatalf("stderr %q, want %q", stderr.String(), want)
	}
}

// names lists a directory's entries, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestMoveAsideKilledBetween: a MoveAside killed between its two renames
// (crash point datadir-aside-record) leaves the data dir whole and the
// next MoveAside finishes that move: the copy, under the name the killed
// one chose, has its version record, and nothing is left at the data
// dir's name. Before the fix the dir moved first: the kill left the
// record at the data dir's name with no dir, and the next MoveAside
// removed it, the copy losing its record.
func TestMoveAsideKilledBetween(t *testing.T) {
	parent := t.TempDir()
	dd := filepath.Join(parent, "data")
	if err := os.MkdirAll(filepath.Join(dd, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteRecord(dd, "3.6.16", time.Now()); err != nil {
		t.Fatal(err)
	}
	killedAt(t, crashpoint.DatadirAsideRecord, "move-aside", dd)
	dst, err := MoveAside(dd, KindReplaced)
	if err != nil || !strings.HasPrefix(dst, dd+".pre-restore-") {
		t.Fatalf("the next MoveAside = %q, %v; want the killed one's copy name (pre-restore)", dst, err)
	}
	if rec, ok, err := ReadRecord(dst); err != nil || !ok || rec.Version != "3.6.16" {
		t.Fatalf("the copy's version record: %+v, %v, %v; want 3.6.16", rec, ok, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "member")); err != nil {
		t.Fatalf("the copy: %v", err)
	}
	if got, want := names(t, parent), []string{filepath.Base(dst), filepath.Base(RecordPath(dst))}; !slices.Equal(got, want) {
		t.Fatalf("left beside: %q, want %q", got, want)
	}
}

// TestMoveAsideFinishesWithNewerRecord: killed between its renames, then
// the member ran again and wrote a new record before the next move: the
// copy gets the newer record, the interrupted move's name, and a staged
// dir's orphan record (KindRestoring) is never taken for one.
func TestMoveAsideFinishesWithNewerRecord(t *testing.T) {
	parent := t.TempDir()
	dd := filepath.Join(parent, "data")
	if err := os.MkdirAll(filepath.Join(dd, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := dd + ".pre-restore-20261127T120000.000Z"
	staged := dd + ".restoring-20261128T120000.000Z"
	for _, r := range []struct{ dir, v string }{{old, "3.5.35"}, {staged, "3.7.3"}, {dd, "3.6.16"}} {
		if err := WriteRecord(r.dir, r.v, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	dst, err := MoveAside(dd, KindPreRestore)
	if err != nil || dst != old {
		t.Fatalf("MoveAside = %q, %v; want the interrupted move's %s", dst, err, old)
	}
	if rec, _, err := ReadRecord(dst); err != nil || rec.Version != "3.6.16" {
		t.Fatalf("the copy's record: %+v, %v; want the newer 3.6.16", rec, err)
	}
	if rec, _, _ := ReadRecord(staged); rec.Version != "3.7.3" {
		t.Fatalf("the staged dir's record changed: %+v", rec)
	}
}

// TestRemoveKeptKilledBetween: a RemoveKept killed between its two
// removals (crash point datadir-remove-record) leaves a copy FindKept
// still lists, and the next RemoveKept removes it whole: nothing is left.
// Before the fix the dir went first: the kill left its version record
// with no dir, which nothing lists or removes.
func TestRemoveKeptKilledBetween(t *testing.T) {
	parent := t.TempDir()
	cp := filepath.Join(parent, "data.restoring-20261128T010203.000Z")
	if err := os.MkdirAll(filepath.Join(cp, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteRecord(cp, "3.6.16", time.Now()); err != nil {
		t.Fatal(err)
	}
	killedAt(t, crashpoint.DatadirRemoveRecord, "remove-kept", cp)
	ks, err := FindKept([]string{parent}, func(string) string { return "" })
	if err != nil || len(ks) != 1 || ks[0].Path != cp {
		t.Fatalf("after the kill, FindKept = %+v, %v; want the copy still listed", ks, err)
	}
	if err := RemoveStaged(filepath.Join(parent, "data"), nil); err != nil {
		t.Fatal(err)
	}
	if got := names(t, parent); len(got) != 0 {
		t.Fatalf("left: %q, want nothing", got)
	}
}

// TestMoveAsideLeavesStaleOrphanRecord: a copy's record with no dir that
// is older than a whole copy (the copy removed by hand, or by an older
// Steward that removed the dir before its record) is not an interrupted
// move: the new copy gets a name of its own, dated now, so pruning, which
// keeps the newest copies, does not take it for the oldest.
func TestMoveAsideLeavesStaleOrphanRecord(t *testing.T) {
	parent := t.TempDir()
	dd := filepath.Join(parent, "data")
	stale := dd + ".pre-restore-20261120T120000.000Z"
	whole := dd + ".pre-upgrade-20261125T120000.000Z"
	for _, d := range []string{filepath.Join(dd, "member"), filepath.Join(whole, "member")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct{ dir, v string }{{stale, "3.5.35"}, {whole, "3.5.35"}, {dd, "3.6.16"}} {
		if err := WriteRecord(r.dir, r.v, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().UTC().Add(-time.Second)
	dst, err := MoveAside(dd, KindPreRestore)
	if err != nil || dst == stale {
		t.Fatalf("MoveAside = %q, %v; want a new name, not the stale orphan's", dst, err)
	}
	m := asideRecordName.FindStringSubmatch(strings.TrimPrefix(filepath.Base(RecordPath(dst)), "data."))
	if m == nil {
		t.Fatalf("copy %s: not a copy's name", dst)
	}
	if at, err := time.Parse(StampLayout, m[2]); err != nil || at.Before(before) {
		t.Fatalf("copy %s dated %v, want now", dst, at)
	}
	if rec, _, err := ReadRecord(dst); err != nil || rec.Version != "3.6.16" {
		t.Fatalf("the copy's record: %+v, %v; want 3.6.16", rec, err)
	}
}
