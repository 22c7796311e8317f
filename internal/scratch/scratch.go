// Package scratch makes the working directory of one job (a snapshot being
// checked, a backup chain being folded, a copy being verified or exported)
// and removes the ones whose job died: a kill -9, an OOM kill or a power
// loss leaves them behind, each holding a database copy, maybe of every key.
//
// Invariant: a scratch directory is held, from its creation until its
// removal, by an flock on its ".held" file, taken by the process that made
// it. The kernel drops that lock when the process dies, so a directory
// whose lock can be taken has no owner. New sweeps those, of its own
// prefix, before making a new one; a directory younger than MinAge is
// never swept (its maker may not have locked it yet).
package scratch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// MinAge is the age under which a scratch directory is never swept.
const MinAge = time.Minute

// heldFile is the lock file inside each scratch directory.
const heldFile = ".held"

// Dir is a scratch directory held by this process until Remove.
type Dir struct {
	// Path is the directory (0700).
	Path string
	// Swept are the abandoned directories New removed first.
	Swept []string
	held  *os.File
}

// New makes a scratch directory under parent (created 0700 if missing;
// empty: os.TempDir()) named prefix followed by a random suffix, locked by
// this process, after removing the abandoned ones of the same prefix
// (Sweep).
func New(parent, prefix string) (*Dir, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	swept, _ := Sweep(parent, prefix, time.Now())
	p, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	f, err := tryLock(filepath.Join(p, heldFile))
	if err != nil {
		_ = os.RemoveAll(p)
		return nil, fmt.Errorf("scratch directory %s: %w", p, err)
	}
	return &Dir{Path: p, Swept: swept, held: f}, nil
}

// Remove removes the directory and everything in it, then lets it go.
func (d *Dir) Remove() error {
	err := os.RemoveAll(d.Path)
	if d.held != nil {
		_ = d.held.Close() // drops the lock
		d.held = nil
	}
	return err
}

// Sweep removes the directories directly under parent whose name starts
// with prefix, that are older than MinAge at now, and whose lock no process
// holds (a directory from before scratch directories were locked counts as
// abandoned too). It returns those removed; a directory it cannot lock or
// remove (another user's, say) is left alone, and the first such error is
// returned beside the others removed.
func Sweep(parent, prefix string, now time.Time) ([]string, error) {
	return sweep(parent, prefix, func(mod time.Time) bool { return now.Sub(mod) >= MinAge })
}

// SweepUnheld is Sweep without the minimum age: it removes every directory
// of prefix whose lock no process holds, however young. Only for a caller
// that holds what keeps every maker of prefix from running (so none is
// between making its directory and locking it): the plan runner's lock
// for a plan step's scratch directory (pkg/plan).
func SweepUnheld(parent, prefix string) ([]string, error) {
	return sweep(parent, prefix, func(time.Time) bool { return true })
}

// sweep removes the unheld directories of prefix under parent that old
// accepts (by their modification time).
func sweep(parent, prefix string, old func(mod time.Time) bool) ([]string, error) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var (
		removed  []string
		firstErr error
	)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		fi, err := e.Info()
		if err != nil || !old(fi.ModTime()) {
			continue
		}
		f, err := tryLock(filepath.Join(p, heldFile))
		if err != nil {
			if !errors.Is(err, errHeld) && firstErr == nil {
				firstErr = fmt.Errorf("sweep %s: %w", p, err)
			}
			continue
		}
		err = os.RemoveAll(p)
		_ = f.Close()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("sweep %s: %w", p, err)
			}
			continue
		}
		removed = append(removed, p)
	}
	return removed, firstErr
}

var errHeld = errors.New("held by a running process")

// tryLock opens (creating, 0600) and flocks path without waiting.
func tryLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errHeld
		}
		return nil, err
	}
	return f, nil
}
