package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
)

// Kept copies: what Steward leaves beside a member's data dir DATADIR,
// named DATADIR.KIND-STAMP (STAMP: UTC, 20060102T150405.000Z). Steward
// never removes a copy on its own, except its own staging output
// (KindRestoring) when the next restore runs; the operator lists them
// and prunes them (`steward restore leftovers`).
const (
	// KindPreRestore: a data dir a restore replaced (MoveAside).
	KindPreRestore = "pre-restore"
	// KindRemoved: the data dir of a member removed from the cluster.
	KindRemoved = "removed"
	// KindReplaced: the data dir a member replace moved aside.
	KindReplaced = "replaced"
	// KindFailedAdd: the data dir of a member whose add failed.
	KindFailedAdd = "failed-add"
	// KindRestoring: a data dir a restore staged and had not put in place
	// (the restore was killed): its own output, never user data.
	KindRestoring = "restoring"
)

// StampLayout is the time in a kept copy's name.
const StampLayout = "20060102T150405.000Z"

// keptName matches a kept copy's base name exactly: BASE.KIND-STAMP.
var keptName = regexp.MustCompile(`^(.+)\.(pre-restore|removed|replaced|failed-add|restoring)-(\d{8}T\d{6}\.\d{3}Z)$`)

// Kept is one kept copy.
type Kept struct {
	Kind string `json:"kind"`
	// Member is the member whose data dir it was; "" when unknown.
	Member string `json:"member"`
	// Path is the copy; DataDir the data dir it was (or was staged for).
	Path    string `json:"path"`
	DataDir string `json:"dataDir"`
	// Bytes is the disk space it takes (allocated blocks, as du counts).
	Bytes int64 `json:"bytes"`
	// Created is the time in its name.
	Created time.Time `json:"created"`
}

// ParseKeptName reports whether name (a base name) is a kept copy's, and
// of which data dir base name, kind and time.
func ParseKeptName(name string) (base, kind string, created time.Time, ok bool) {
	m := keptName.FindStringSubmatch(name)
	if m == nil {
		return "", "", time.Time{}, false
	}
	t, err := time.Parse(StampLayout, m[3])
	if err != nil {
		return "", "", time.Time{}, false
	}
	return m[1], m[2], t, true
}

// KeptDirs are the directories kept copies of a Steward directory's
// members live in: beside each data dir (byDir maps a member's cleaned,
// absolute data dir to its name), and stewardDir/members/* (a removed
// member's, no longer named anywhere, stays there); memberOf names the
// member a data dir path belongs to ("" for none). Used by the coordinator
// for this machine's members and by each agent for its host's.
func KeptDirs(stewardDir string, byDir map[string]string) (dirs []string, memberOf func(dataDir string) string) {
	for dd := range byDir {
		dirs = append(dirs, filepath.Dir(dd))
	}
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	root := filepath.Join(stewardDir, "members")
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join(root, e.Name()))
			}
		}
	}
	return dirs, func(dd string) string {
		if n, ok := byDir[filepath.Clean(dd)]; ok {
			return n
		}
		if filepath.Dir(filepath.Dir(dd)) == root {
			return filepath.Base(filepath.Dir(dd))
		}
		return ""
	}
}

// FindKept lists the kept copies directly inside dirs (each read once;
// a missing one holds none), oldest first. member names the member a data
// dir path belongs to ("" when unknown). A version record moved with a
// copy (COPY.version) is part of it.
func FindKept(dirs []string, member func(dataDir string) string) ([]Kept, error) {
	var out []Kept
	seen := map[string]bool{}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if seen[d] {
			continue
		}
		seen[d] = true
		ents, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			base, kind, created, ok := ParseKeptName(e.Name())
			if !ok || !e.IsDir() { // a symlink is not ours
				continue
			}
			p := filepath.Join(d, e.Name())
			k := Kept{Kind: kind, Path: p, DataDir: filepath.Join(d, base), Created: created}
			k.Member = member(k.DataDir)
			k.Bytes = DiskUsage(p) + DiskUsage(RecordPath(p))
			out = append(out, k)
		}
	}
	slices.SortStableFunc(out, func(a, b Kept) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// DiskUsage is the disk space path takes, recursively (allocated blocks,
// as du counts them; 0 when it is not there).
func DiskUsage(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// RemoveKept removes a kept copy (and the version record moved with it)
// after checking that path is one: a directory (not a symlink) directly
// inside one of dirs, named BASE.KIND-STAMP. Anything else is refused and
// left alone.
func RemoveKept(path string, dirs []string) error {
	path = filepath.Clean(path)
	if !slices.ContainsFunc(dirs, func(d string) bool { return filepath.Clean(d) == filepath.Dir(path) }) {
		return fmt.Errorf("%s is not beside a member's data dir: not a kept copy", path)
	}
	if _, _, _, ok := ParseKeptName(filepath.Base(path)); !ok {
		return fmt.Errorf("%s is not named as a kept copy (DATADIR.KIND-STAMP)", path)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("kept copy %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: not a kept copy", path)
	}
	// Invariant (a kill between the two removals leaves nothing behind
	// that no one removes): the record goes first, then the dir. Killed
	// between, the copy is a dir without a record, which FindKept still
	// lists and the next RemoveKept (or RemoveStaged) removes; the other
	// order left a record with no dir, which nothing lists.
	if err := os.Remove(RecordPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the version record of %s: %w", path, err)
	}
	crashpoint.Hit(crashpoint.DatadirRemoveRecord)
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove kept copy %s: %w", path, err)
	}
	return nil
}

// RemoveStaged removes what restores staged for dataDir and never put in
// place (DATADIR.restoring-STAMP, exactly: KindRestoring), calling removed
// for each. The caller must hold what keeps a restore from staging there
// meanwhile (the restore lock).
func RemoveStaged(dataDir string, removed func(path string)) error {
	dataDir = filepath.Clean(dataDir)
	ks, err := FindKept([]string{filepath.Dir(dataDir)}, func(string) string { return "" })
	if err != nil {
		return err
	}
	for _, k := range ks {
		if k.Kind != KindRestoring || k.DataDir != dataDir {
			continue
		}
		if err := RemoveKept(k.Path, []string{filepath.Dir(dataDir)}); err != nil {
			return err
		}
		if removed != nil {
			removed(k.Path)
		}
	}
	return nil
}
