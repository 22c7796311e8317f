// Package backup takes, stores, verifies and fetches etcd backups. A backup
// is an object in a Store plus a JSON manifest next to it; the manifest is
// written last, so a backup without one never counts (it is an upload that
// did not finish).
package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// Store is where backups live. Implementations make Put atomic: a reader
// sees the whole object or none of it.
type Store interface {
	// Put stores r under name, replacing nothing: an existing name is an error.
	Put(ctx context.Context, name string, r io.Reader) error
	// Get opens a stored object.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// List returns the names under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes an object; a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// String describes the store for messages.
	String() string
}

// ErrNotExist is returned by Get for a missing object.
var ErrNotExist = errors.New("backup object does not exist")

// LocalStore keeps backups in a directory (0700; objects 0600).
type LocalStore struct {
	Dir string
}

// NewLocalStore returns a store in dir, creating it.
func NewLocalStore(dir string) (*LocalStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup store %s: %w", dir, err)
	}
	return &LocalStore{Dir: dir}, nil
}

func (s *LocalStore) String() string { return s.Dir }

func (s *LocalStore) path(name string) (string, error) {
	clean := filepath.Clean("/" + name)
	if clean == "/" || strings.Contains(name, "..") {
		return "", fmt.Errorf("invalid backup object name %q", name)
	}
	return filepath.Join(s.Dir, clean), nil
}

// Put writes to a temporary file, syncs it and renames it into place.
func (s *LocalStore) Put(ctx context.Context, name string, r io.Reader) (err error) {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return fmt.Errorf("backup object %s already exists in %s", name, s.Dir)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err = io.Copy(tmp, ctxReader{ctx, r}); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	// Linked, not renamed, into place: a link fails when the name exists,
	// so of two writers racing for one name (two restores taking a
	// timeline number) one is refused, where a rename would let the
	// second silently replace the first. The Stat above only spares the
	// copy in the common case.
	if err = os.Link(tmp.Name(), p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("backup object %s already exists in %s", name, s.Dir)
		}
		return err
	}
	// The temporary name goes; a failure to remove it leaves a dot file
	// List skips, never a second object.
	_ = os.Remove(tmp.Name())
	return atomicfile.SyncDir(filepath.Dir(p))
}

// FilePutter is a Store that can take a finished local file as an object
// without copying it. putWithManifest uses it for objects that are files.
type FilePutter interface {
	// PutFile stores the file at path under name, replacing nothing, as
	// Put would store its content; the file must not change afterwards.
	PutFile(ctx context.Context, name, path string) error
}

// fileHolder is a store that can tell whether an object is a given local
// file (LocalStore, which hard-links what PutFile is given).
type fileHolder interface {
	HoldsFile(name, path string) (bool, error)
}

// PutFile syncs the file at path and hard-links it into place (atomic, and
// an existing name is an error, as for Put): a full snapshot of hundreds
// of megabytes is stored without a second copy. When path is on another
// file system than the store, it copies the file with Put.
func (s *LocalStore) PutFile(ctx context.Context, name, path string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch err := os.Link(path, p); {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("backup object %s already exists in %s", name, s.Dir)
	case err != nil:
		// Another file system (or no hard links): copy.
		return s.Put(ctx, name, f)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}

// HoldsFile reports whether the object name is the file at path itself
// (the same inode: PutFile hard-linked it), not a copy.
func (s *LocalStore) HoldsFile(name, path string) (bool, error) {
	p, err := s.path(name)
	if err != nil {
		return false, err
	}
	stored, err := os.Stat(p)
	if err != nil {
		return false, err
	}
	written, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(stored, written), nil
}

// Get opens an object.
func (s *LocalStore) Get(_ context.Context, name string) (io.ReadCloser, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s in %s", ErrNotExist, name, s.Dir)
	}
	return f, err
}

// List returns object names under prefix (temporary files excluded).
func (s *LocalStore) List(_ context.Context, prefix string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		rel, err := filepath.Rel(s.Dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, prefix) {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// Delete removes an object.
func (s *LocalStore) Delete(_ context.Context, name string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
