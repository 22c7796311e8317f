package binaries

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// CheckRecorded checks a stored tool (STORE/etcd-vVERSION/TOOL) against the
// SHA-256 its version's manifest records, before it is run. Nothing is
// checked for a version directory without a manifest, or a tool the
// manifest lists no sum for (a store laid out by hand: `steward binaries
// verify` reports those). A file that matched once is not hashed again
// while its device, inode, size, mtime and ctime stay the same.
func CheckRecorded(path string) error {
	dir, tool := filepath.Split(path)
	m, err := readManifest(filepath.Clean(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s before running it: %w", path, err)
	}
	want, ok := m.Files[tool]
	if !ok {
		return nil
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
		return fmt.Errorf("%s: %w: its SHA-256 is %s, the manifest says %s; import the version again (`steward binaries import`) or restore the file",
			path, ErrBinaryChanged, got, want)
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
