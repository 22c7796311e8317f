package binaries

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrBinaryChanged: a stored binary's SHA-256 is not the one its version's
// manifest recorded at import; it was replaced or corrupted since.
var ErrBinaryChanged = errors.New("stored binary does not match the SHA-256 recorded at import")

// fileID is what CheckRecorded compares to skip hashing a file again:
// replacing or rewriting a file changes its inode, size, mtime or ctime
// (ctime cannot be set back by the writer).
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
	sum          string
}

var (
	recordedMu sync.Mutex
	// recordedOK maps a path to the file last seen to match its recorded
	// sum. Guarded by recordedMu.
	recordedOK = map[string]fileID{}
)

// ErrNotRecorded: a stored binary has no SHA-256 recorded at import (its
// version directory has no manifest, or the manifest does not list it), so
// nothing tells it is the file imported: it is not run.
var ErrNotRecorded = errors.New("stored binary has no SHA-256 recorded at import")

// CheckRecorded checks a stored tool (STORE/etcd-vVERSION/TOOL) against the
// SHA-256 its version's manifest records, before it is run. A version
// directory without a manifest, or a tool the manifest lists no sum for (a
// store laid out or changed by hand), is refused with ErrNotRecorded,
// saying how to import the version again. A file that matched once is not
// hashed again while its device, inode, size, mtime and ctime stay the
// same.
func CheckRecorded(path string) error {
	dir, tool := filepath.Split(path)
	dir = filepath.Clean(dir)
	m, err := readManifest(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return notRecorded(dir, fmt.Sprintf("%s: %v: %s has no %s", path, ErrNotRecorded, dir, ManifestName))
	}
	if err != nil {
		return fmt.Errorf("check %s before running it: %w", path, err)
	}
	want, ok := m.Files[tool]
	if !ok {
		return notRecorded(dir, fmt.Sprintf("%s: %v: the manifest of %s lists no SHA-256 for %s (added after the import?)", path, ErrNotRecorded, dir, tool))
	}
	id, err := statID(path)
	if err != nil {
		return fmt.Errorf("check %s before running it: %w", path, err)
	}
	id.sum = want
	recordedMu.Lock()
	seen, hit := recordedOK[path]
	recordedMu.Unlock()
	if hit && seen == id {
		return nil
	}
	got, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("check %s before running it: %w", path, err)
	}
	if got != want {
		return &ProblemError{err: ErrBinaryChanged, Problem: Problem{Kind: KindChanged, Version: versionOfDir(dir), Store: filepath.Dir(dir),
			Message: fmt.Sprintf("%s: %v: its SHA-256 is %s, the manifest says %s; import the version again or restore the file",
				path, ErrBinaryChanged, got, want)}}
	}
	// Stat again: a file changed while it was hashed is not remembered.
	if again, err := statID(path); err == nil {
		again.sum = want
		if again == id {
			recordedMu.Lock()
			recordedOK[path] = id
			recordedMu.Unlock()
		}
	}
	return nil
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
		id.ctime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return id, nil
}

// notRecorded is the ErrNotRecorded problem of version directory dir,
// msg followed by how to give it a manifest: import its version again from
// the release or the build it came from (the command layer names the
// command after these words: cli.LibraryAdvice).
func notRecorded(dir, msg string) error {
	v := versionOfDir(dir)
	return &ProblemError{err: ErrNotRecorded, Problem: Problem{Kind: KindNotRecorded, Version: v, Store: filepath.Dir(dir),
		Message: fmt.Sprintf("%s; import etcd %s again from its release tarball or build directory", msg, v)}}
}

// versionOfDir is the version of a version directory (STORE/etcd-vVERSION).
func versionOfDir(dir string) string { return strings.TrimPrefix(filepath.Base(dir), DirPrefix) }
