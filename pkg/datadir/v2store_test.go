package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyTree: the copy the v2 store check runs on is made in Go (no `cp`
// from PATH): files with their contents and modes, directories, links.
func TestCopyTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	for _, d := range []string{"member/snap", "member/wal"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "member/wal/0.wal"), []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("wal/0.wal", filepath.Join(src, "member/link")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "") // no cp to find
	dst := filepath.Join(t.TempDir(), "copy")
	if err := copyTree(t.Context(), src, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "member/wal/0.wal"))
	if err != nil || string(b) != "wal" {
		t.Fatalf("copied wal: %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "member/wal/0.wal")); fi.Mode().Perm() != 0o600 {
		t.Errorf("copied file mode %v; want 0600", fi.Mode())
	}
	if l, err := os.Readlink(filepath.Join(dst, "member/link")); err != nil || l != "wal/0.wal" {
		t.Errorf("copied link: %q, %v", l, err)
	}
}

// TestCheckV2StoreNeedsAbsoluteTool: the tool comes from the binary store,
// never from a lookup on PATH.
func TestCheckV2StoreNeedsAbsoluteTool(t *testing.T) {
	src := t.TempDir()
	_, err := CheckV2Store(t.Context(), "etcdutl", src, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("CheckV2Store with etcdutl from PATH = %v; want it refused", err)
	}
}
