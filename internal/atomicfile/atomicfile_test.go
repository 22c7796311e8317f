package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("content %q err %v", b, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "snapshot.db")
	write := func(s string) func(*os.File) error {
		return func(f *os.File) error { _, err := f.WriteString(s); return err }
	}
	if err := Create(p, 0o600, write("one")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "one" {
		t.Fatalf("content %q err %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 600", fi.Mode().Perm())
	}
	// An existing file is never replaced.
	if err := Create(p, 0o600, write("two")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over an existing file = %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Errorf("existing file changed to %q", b)
	}
	// A failed write leaves nothing at the path.
	q := filepath.Join(dir, "failed.db")
	boom := errors.New("boom")
	if err := Create(q, 0o600, func(f *os.File) error { _, _ = f.WriteString("half"); return boom }); !errors.Is(err, boom) {
		t.Errorf("Create with a failing write = %v, want boom", err)
	}
	if _, err := os.Lstat(q); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed Create left %s: %v", q, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

// TestMkdirAll: the directories are made with perm, and the parent of
// each one made is synced (none when all exist).
func TestMkdirAll(t *testing.T) {
	var synced []string
	syncDir = func(d string) error { synced = append(synced, d); return SyncDir(d) }
	t.Cleanup(func() { syncDir = SyncDir })
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%v %v", fi, err)
	}
	want := []string{filepath.Join(root, "a", "b"), filepath.Join(root, "a"), root}
	if strings.Join(synced, ",") != strings.Join(want, ",") {
		t.Errorf("synced %v, want %v", synced, want)
	}
	synced = nil
	if err := MkdirAll(dir, 0o700); err != nil || len(synced) != 0 {
		t.Errorf("again: %v, synced %v", err, synced)
	}
}
