// Package dirmode keeps the Steward directory private: owned by the user
// running Steward, mode 0700, as are the subdirectories Steward uses in it,
// under ancestors no other user can write.
//
// Another local user who can write to the Steward directory can replace
// what sits in it (cluster.yaml, and with it the binary store path; run/,
// the store). Secure tightens what the user owns and refuses what the user
// cannot fix alone: a directory owned by someone else, or one with an
// ancestor (any directory on its path up to /, as OpenSSH's StrictModes
// checks) owned by a user other than root and the caller, or writable by
// group or others without the sticky bit.
package dirmode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Subdirs are the subdirectories of a Steward directory Steward uses.
var Subdirs = []string{"run", "pki", "agent", "members", "logs", "status", "binaries", "backups", "secrets", "join"}

// ErrNotPrivate: the Steward directory, a subdirectory of it, or one of
// its ancestors is owned by another user or writable by other users in a
// way Steward cannot (or may not) tighten.
var ErrNotPrivate = errors.New("the Steward directory is not private")

// Secure checks dir (which need not exist yet), every ancestor of it up to
// / (on the path as given and on the path with symbolic links resolved),
// and the subdirectories in Subdirs that exist. Nothing changes unless
// every check passes; then a directory (or subdirectory) the user owns
// with any group or other bits is made 0700. It returns the paths it tightened, each with its old mode.
func Secure(dir string) (tightened []string, err error) {
	uid := os.Geteuid()
	if err := checkAncestors(dir, uid); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("steward dir %s: %w", dir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Follow a symbolic link the operator made; check its target.
		if fi, err = os.Stat(dir); err != nil {
			return nil, fmt.Errorf("steward dir %s: %w", dir, err)
		}
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("steward dir %s is not a directory", dir)
	}
	todo := []string{}
	check := func(p string, fi fs.FileInfo) error {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if int(st.Uid) != uid {
			return fmt.Errorf("%w: %s is owned by uid %d, not by you (uid %d), and another user's directory can be changed under Steward: use a directory you own, or have its owner run Steward",
				ErrNotPrivate, p, st.Uid, uid)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			todo = append(todo, p)
		}
		return nil
	}
	if err := check(dir, fi); err != nil {
		return nil, err
	}
	for _, s := range Subdirs {
		p := filepath.Join(dir, s)
		sfi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && !sfi.IsDir()) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("steward dir %s: %w", dir, err)
		}
		if err := check(p, sfi); err != nil {
			return nil, err
		}
	}
	for _, p := range todo {
		fi, err := os.Stat(p)
		if err != nil {
			return tightened, err
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return tightened, fmt.Errorf("make %s private (0700): %w", p, err)
		}
		tightened = append(tightened, fmt.Sprintf("%s (was %04o)", p, fi.Mode().Perm()))
	}
	return tightened, nil
}

// checkAncestors checks every existing ancestor of dir up to /, on the
// path as given and on the path with symbolic links resolved (a link's
// own directory may be replaced as much as its target's): each must be
// owned by root or by uid, and not writable by group or others unless it
// has the sticky bit (like /tmp). The first failure is returned, naming
// the ancestor and what to run.
func checkAncestors(dir string, uid int) error {
	dir = filepath.Clean(dir)
	paths := []string{dir}
	if real, err := resolveExisting(dir); err == nil && real != dir {
		paths = append(paths, real)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		for a, i := filepath.Dir(p), 0; ; a, i = filepath.Dir(a), i+1 {
			if !seen[a] {
				seen[a] = true
				if err := checkAncestor(dir, a, i == 0, uid); err != nil {
					return err
				}
			}
			if a == filepath.Dir(a) {
				break
			}
		}
	}
	return nil
}

// resolveExisting resolves the symbolic links in the longest existing
// prefix of p and appends the rest unchanged.
func resolveExisting(p string) (string, error) {
	rest := ""
	for {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", fs.ErrNotExist
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// checkAncestor checks one ancestor a of dir; a missing one, or a
// symbolic link (its own mode means nothing; the resolved walk checks its
// target), passes.
func checkAncestor(dir, a string, parent bool, uid int) error {
	fi, err := os.Lstat(a)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink != 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("steward dir %s: its ancestor: %w", dir, err)
	}
	role := "its ancestor"
	if parent {
		role = "its parent"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("%w: %s %s is owned by uid %d, neither you (uid %d) nor root, so that user can rename or replace %s: have root run `chown root %s`, or use a Steward directory whose every ancestor is owned by you or root",
			ErrNotPrivate, role, a, st.Uid, uid, dir, a)
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		who := "every user"
		if perm&0o002 == 0 {
			who = "its group"
		}
		return fmt.Errorf("%w: %s %s is writable by %s (mode %04o, no sticky bit), so any of them can rename or replace %s: run `chmod go-w %s` (or `chmod +t %s` if it must stay shared, like /tmp), or use a Steward directory whose every ancestor only you or root can write",
			ErrNotPrivate, role, a, who, perm, dir, a, a)
	}
	return nil
}
