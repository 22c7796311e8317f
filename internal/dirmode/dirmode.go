// Package dirmode keeps the Steward directory private: owned by the user
// running Steward, mode 0700, as are the subdirectories Steward uses in it,
// in a parent no other user can rename it in.
//
// Another local user who can write to the Steward directory can replace
// what sits in it (cluster.yaml, and with it the binary store path; run/,
// the store). Secure tightens what the user owns and refuses what the user
// cannot fix alone: a directory owned by someone else, or one whose parent
// others may write without the sticky bit.
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

// ErrNotPrivate: the Steward directory, a subdirectory of it, or its
// parent is owned by another user or writable by other users in a way
// Steward cannot (or may not) tighten.
var ErrNotPrivate = errors.New("the Steward directory is not private")

// Secure checks dir (which need not exist yet) and the subdirectories in
// Subdirs that exist. Nothing changes unless every check passes; then a
// directory (or subdirectory) the user owns with any group or other bits
// is made 0700. It returns the paths it tightened, each with its old mode.
func Secure(dir string) (tightened []string, err error) {
	uid := os.Geteuid()
	parent := filepath.Dir(dir)
	if pfi, err := os.Stat(parent); err == nil {
		if pfi.Mode().Perm()&0o002 != 0 && pfi.Mode()&fs.ModeSticky == 0 {
			return nil, fmt.Errorf("%w: its parent %s is writable by every user (mode %04o, no sticky bit), so any of them can rename or replace %s: use a directory whose parent only you can write",
				ErrNotPrivate, parent, pfi.Mode().Perm(), dir)
		}
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
