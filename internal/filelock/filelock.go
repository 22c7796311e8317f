// Package filelock takes exclusive advisory locks (flock) on files, so that
// two processes sharing a Steward directory never do the same job at once.
// The kernel drops a lock when its process dies, so a crash never leaves a
// stale lock behind.
package filelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrHeld is returned by TryLock when another process holds the lock.
var ErrHeld = errors.New("the lock is held by another process")

// Lock is a held lock.
type Lock struct{ f *os.File }

// TryLock takes the lock on path without waiting, creating the file (0600)
// and its directory (0700) when needed. It returns an error wrapping ErrHeld
// when another process holds it.
func TryLock(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, ErrHeld)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up.
func (l *Lock) Release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
}
