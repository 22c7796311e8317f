// Package atomicfile writes files so that a reader, or a crash, never sees a
// half-written one: the bytes go to a temporary file in the same directory,
// which is synced, renamed over the target, and the directory is synced.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile atomically replaces path with data, with permission perm.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// Create writes a new file at path, with permission perm, from what write
// puts into the open temporary file it is handed (for content too large to
// hold in memory). The file appears whole or not at all, and never replaces
// one that exists: it is linked into place, which fails with an error
// wrapping fs.ErrExist when path exists (also one created meanwhile). On any
// failure the temporary file is removed and nothing is left at path.
func Create(path string, perm os.FileMode, write func(*os.File) error) (err error) {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("create %s: %w", path, fs.ErrExist)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name()) // after the link, path keeps the data
	}()
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err = write(tmp); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("create %s: sync: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err = os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("create %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that a rename or create inside it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// syncDir is SyncDir; MkdirAll's test records its calls.
var syncDir = SyncDir

// MkdirAll is os.MkdirAll whose new directories are durable: each one it
// creates is synced into its parent (the parent of each is synced), so a
// crash after it returns cannot lose a directory a file was then written
// into.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mkdir %s: %w", dir, err)
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
