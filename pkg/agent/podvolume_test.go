package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func owner(t *testing.T, p string) Owner {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return Owner{int(st.Uid), int(st.Gid)}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making files another user's needs root (CAP_CHOWN)")
	}
}

// A volume written by root pods (an operator from before the member pods
// ran as 65532): every file, directory and symbolic link (not its target)
// becomes the user's, modes unchanged; a second run changes nothing.
func TestTakeVolumeRootWritten(t *testing.T) {
	needRoot(t)
	vol := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"pki", "members/db-0/member/wal", "members/db-0/member/snap", "run"} {
		if err := os.MkdirAll(filepath.Join(vol, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"agent.yaml", "pki/agent.key", "members/db-0/member/wal/0.wal", "members/db-0/member/snap/db"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(vol, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(vol, "run", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o777); err != nil { // a local-path volume's root
		t.Fatal(err)
	}
	o := Owner{65532, 65532}
	n, err := TakeVolume(vol, o)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	err = filepath.WalkDir(vol, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		count++
		if got := owner(t, p); got != o {
			t.Errorf("%s owned by %s, want %s", p, got, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != count {
		t.Errorf("%d entries changed, the volume holds %d", n, count)
	}
	if got := owner(t, outside); got.UID != 0 {
		t.Errorf("the symbolic link's target was changed: owned by %s", got)
	}
	if fi, _ := os.Stat(filepath.Join(vol, "pki", "agent.key")); fi.Mode().Perm() != 0o600 {
		t.Errorf("a key's mode changed to %04o", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(vol); fi.Mode().Perm() != 0o777 {
		t.Errorf("the root's mode changed to %04o", fi.Mode().Perm())
	}
	if n, err := TakeVolume(vol, o); err != nil || n != 0 {
		t.Errorf("second run: %d changed, %v; want none", n, err)
	}
}

// A run interrupted after part of the volume was made the user's (the
// contents before their directory: a directory the user owns is done) is
// finished by the next one, which never needs to read the user's 0700
// directories; an entry of the user with root's group gets the group.
func TestTakeVolumeResumes(t *testing.T) {
	needRoot(t)
	vol := t.TempDir()
	o := Owner{65532, 65532}
	done := filepath.Join(vol, "members", "db-0") // a subtree finished before the interruption
	if err := os.MkdirAll(filepath.Join(done, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(done, "member"), done} {
		if err := os.Lchown(p, o.UID, o.GID); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(vol, "agent.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(vol, "agent.yaml"), o.UID, 0); err != nil {
		t.Fatal(err)
	}
	n, err := TakeVolume(vol, o)
	if err != nil {
		t.Fatal(err)
	}
	// vol, members, agent.yaml's group: members/db-0 and below are not
	// visited.
	if n != 3 {
		t.Errorf("%d entries changed, want 3 (the root, members/, agent.yaml's group)", n)
	}
	for _, p := range []string{vol, filepath.Join(vol, "members"), filepath.Join(vol, "agent.yaml"), done} {
		if got := owner(t, p); got != o {
			t.Errorf("%s owned by %s, want %s", p, got, o)
		}
	}
}

func TestTakeVolumeRefusals(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TakeVolume(f, Owner{65532, 65532}); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a file: %v", err)
	}
	if _, err := TakeVolume(filepath.Join(t.TempDir(), "missing"), Owner{65532, 65532}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing directory: %v", err)
	}
}

// The join file copied out of the Secret's mount: 0600, the user's, an
// earlier copy replaced, no temporary file left.
func TestCopyPrivate(t *testing.T) {
	needRoot(t)
	src := filepath.Join(t.TempDir(), "db-0.yaml")
	if err := os.WriteFile(src, []byte("key: one\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // an emptyDir's root
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "db-0.yaml")
	o := Owner{65532, 65532}
	for _, content := range []string{"key: one\n", "key: two\n"} {
		if err := os.WriteFile(src, []byte(content), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := CopyPrivate(src, dst, o); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(dst)
		if err != nil || string(b) != content {
			t.Errorf("copy holds %q (%v), want %q", b, err, content)
		}
		fi, _ := os.Stat(dst)
		if fi.Mode().Perm() != 0o600 || owner(t, dst) != o {
			t.Errorf("copy %04o owned by %s", fi.Mode().Perm(), owner(t, dst))
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the destination, want the copy alone", len(entries))
	}
	if err := CopyPrivate(filepath.Join(t.TempDir(), "missing.yaml"), dst, o); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing source: %v", err)
	}
}

func TestParseOwner(t *testing.T) {
	if o, err := ParseOwner("65532:65533"); err != nil || o != (Owner{65532, 65533}) {
		t.Errorf("65532:65533 = %v, %v", o, err)
	}
	for _, s := range []string{"", "65532", "0:0", "0:65532", "65532:0", "a:b", "-1:5", "65532:65532:1", "2147483648:1", " 1:1", "1:1 "} {
		if _, err := ParseOwner(s); !errors.Is(err, ErrBadOwner) {
			t.Errorf("ParseOwner(%q) = %v, want ErrBadOwner", s, err)
		}
	}
}

func FuzzParseOwner(f *testing.F) {
	f.Add("65532:65532")
	f.Add("0:1")
	f.Add("1:")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOwner(s)
		if err != nil {
			return
		}
		if o.UID < 1 || o.GID < 1 {
			t.Fatalf("%q parsed as %s", s, o)
		}
		if back, err := ParseOwner(o.String()); err != nil || back != o {
			t.Fatalf("%q: %s does not parse back (%v)", s, o, err)
		}
	})
}
