package restore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenMemberRefusesOtherSources: a restore from a member's own
// database (recovery's reseed) refuses a snapshot file, a backup, a target
// and a timeline before anything is read.
func TestOpenMemberRefusesOtherSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"a snapshot file", Options{FromSnapshot: "/tmp/x.snapshot"}},
		{"a backup ID", Options{Backup: "20261124T000000Z"}},
		{"a revision", Options{ToRevision: 5}},
		{"a time", Options{ToTime: time.Now()}},
		{"a timeline", Options{Timeline: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.FromMember = "etcd-3"
			_, err := openMember(nil, tc.o)
			if !errors.Is(err, ErrSourceConflict) || !strings.Contains(err.Error(), "etcd-3") || strings.Contains(err.Error(), "--") {
				t.Fatalf("openMember = %v; want ErrSourceConflict naming the member and no flag", err)
			}
		})
	}
}

// TestCopyDatabase: the copy is 0600 and equal to the source; an existing
// destination is never replaced, and a missing source leaves nothing.
func TestCopyDatabase(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "db"), filepath.Join(dir, "copy.db")
	if err := os.WriteFile(src, []byte("database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copyDatabase(src, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "database" {
		t.Fatalf("copy = %q, %v", b, err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode %v, want 0600", fi.Mode().Perm())
	}
	if err := os.WriteFile(src, []byte("newer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copyDatabase(src, dst); err == nil {
		t.Fatal("copying over an existing file succeeded")
	}
	if b, _ := os.ReadFile(dst); string(b) != "database" {
		t.Errorf("an existing destination was changed: %q", b)
	}
	missing := filepath.Join(dir, "none.db")
	if err := copyDatabase(filepath.Join(dir, "absent"), missing); err == nil {
		t.Fatal("copying a missing database succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed copy left %s (%v)", missing, err)
	}
}
