package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
