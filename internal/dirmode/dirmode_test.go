package dirmode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// mkdir makes p with exactly mode m, whatever the umask.
func mkdir(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, m); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func TestSecure(t *testing.T) {
	t.Run("a permissive directory and its subdirectories are made 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		for _, p := range []string{dir, filepath.Join(dir, "run"), filepath.Join(dir, "pki"), filepath.Join(dir, "elsewhere")} {
			mkdir(t, p, 0o777)
		}
		got, err := Secure(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || !strings.Contains(got[0], "(was 0777)") {
			t.Errorf("tightened %q; want d, d/run, d/pki, each was 0777", got)
		}
		for _, p := range []string{dir, filepath.Join(dir, "run"), filepath.Join(dir, "pki")} {
			if m := mode(t, p); m != 0o700 {
				t.Errorf("%s is %04o after Secure; want 0700", p, m)
			}
		}
		if m := mode(t, filepath.Join(dir, "elsewhere")); m != 0o777 {
			t.Errorf("a directory Steward does not use was changed to %04o", m)
		}
	})

	t.Run("a directory not yet created passes", func(t *testing.T) {
		if got, err := Secure(filepath.Join(t.TempDir(), "new")); err != nil || len(got) != 0 {
			t.Fatalf("Secure(new) = %q, %v", got, err)
		}
	})

	t.Run("a parent every user may write is refused, nothing changed", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "open")
		mkdir(t, parent, 0o777)
		dir := filepath.Join(parent, "d")
		mkdir(t, dir, 0o777)
		_, err := Secure(dir)
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its parent "+parent+" is writable by every user") {
			t.Fatalf("Secure = %v; want the parent named", err)
		}
		if m := mode(t, dir); m != 0o777 {
			t.Errorf("a refused directory was changed to %04o", m)
		}
	})

	t.Run("a sticky parent (like /tmp) is fine", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "sticky")
		mkdir(t, parent, 0o777)
		if err := os.Chmod(parent, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		if _, err := Secure(filepath.Join(parent, "d")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("another user's directory is refused", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory to another user")
		}
		dir := filepath.Join(t.TempDir(), "d")
		mkdir(t, dir, 0o700)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := Secure(dir)
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), dir+" is owned by uid 65534, not by you (uid 0)") {
			t.Fatalf("Secure = %v; want the owner named", err)
		}
	})

	t.Run("an ancestor above the parent every user may write is refused, naming it", func(t *testing.T) {
		top := filepath.Join(t.TempDir(), "open")
		mkdir(t, top, 0o777)
		parent := filepath.Join(top, "private")
		mkdir(t, parent, 0o700)
		dir := filepath.Join(parent, "d")
		mkdir(t, dir, 0o777)
		_, err := Secure(dir)
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its ancestor "+top+" is writable by every user") ||
			!strings.Contains(err.Error(), "chmod go-w "+top) {
			t.Fatalf("Secure = %v; want the ancestor named with chmod go-w", err)
		}
		if m := mode(t, dir); m != 0o777 {
			t.Errorf("a refused directory was changed to %04o", m)
		}
	})

	t.Run("a group-writable ancestor is refused", func(t *testing.T) {
		top := filepath.Join(t.TempDir(), "team")
		mkdir(t, top, 0o770)
		mkdir(t, filepath.Join(top, "p"), 0o700)
		_, err := Secure(filepath.Join(top, "p", "d"))
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its ancestor "+top+" is writable by its group (mode 0770") {
			t.Fatalf("Secure = %v; want the group-writable ancestor named", err)
		}
	})

	t.Run("an ancestor not yet created is skipped, the ones above are checked", func(t *testing.T) {
		top := filepath.Join(t.TempDir(), "open")
		mkdir(t, top, 0o777)
		_, err := Secure(filepath.Join(top, "missing", "d"))
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its ancestor "+top+" is writable by every user") {
			t.Fatalf("Secure = %v; want the existing ancestor named", err)
		}
	})

	t.Run("a symbolic link into a tree others may write is refused at the target's ancestor", func(t *testing.T) {
		root := t.TempDir()
		open := filepath.Join(root, "open")
		mkdir(t, open, 0o777)
		target := filepath.Join(open, "inner")
		mkdir(t, target, 0o700)
		safe := filepath.Join(root, "safe")
		mkdir(t, safe, 0o700)
		if err := os.Symlink(target, filepath.Join(safe, "link")); err != nil {
			t.Fatal(err)
		}
		_, err := Secure(filepath.Join(safe, "link", "d"))
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its ancestor "+open+" is writable by every user") {
			t.Fatalf("Secure = %v; want the link target's open ancestor named", err)
		}
	})

	t.Run("a path of directories owned by you or root, none writable by others, passes", func(t *testing.T) {
		top := filepath.Join(t.TempDir(), "a")
		mkdir(t, top, 0o755)
		mkdir(t, filepath.Join(top, "b"), 0o750)
		if _, err := Secure(filepath.Join(top, "b", "d")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an ancestor owned by another user is refused", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory to another user")
		}
		top := filepath.Join(t.TempDir(), "theirs")
		mkdir(t, top, 0o755)
		if err := os.Chown(top, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		mkdir(t, filepath.Join(top, "p"), 0o700)
		_, err := Secure(filepath.Join(top, "p", "d"))
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "its ancestor "+top+" is owned by uid 65534, neither you (uid 0) nor root") ||
			!strings.Contains(err.Error(), "chown root "+top) {
			t.Fatalf("Secure = %v; want the other user's ancestor named", err)
		}
	})
}
