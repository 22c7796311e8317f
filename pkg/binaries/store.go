// Package binaries is Steward's versioned etcd binary store: a directory that
// holds one subdirectory per etcd release, each with the etcd server (and
// etcdctl and etcdutl when available) and a manifest of their SHA-256 sums.
//
// Layout:
//
//	<store>/etcd-v3.6.16/etcd
//	<store>/etcd-v3.6.16/etcdctl        (optional)
//	<store>/etcd-v3.6.16/etcdutl        (optional)
//	<store>/etcd-v3.6.16/manifest.json
//
// Besides the store, the etcd server linked into Steward (the embedded
// version, see EmbeddedVersion) can run members of its own version: Resolve
// falls back to it when the store lacks that version.
//
// Versions are passed as "3.6.16"; "v3.6.16" is accepted and normalised.
package binaries

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
)

const (
	// ManifestName is the name of the manifest file in a version directory.
	ManifestName = "manifest.json"
	// DirPrefix prefixes the name of each version directory: etcd-v3.6.16.
	DirPrefix = "etcd-v"

	// SourceStore marks a Binary held in the store.
	SourceStore = "store"
	// SourceEmbedded marks the etcd server linked into Steward.
	SourceEmbedded = "embedded"

	// EmbeddedCommand is the steward subcommand that runs the embedded etcd.
	EmbeddedCommand = "etcd"

	toolEtcd    = "etcd"
	toolEtcdctl = "etcdctl"
	toolEtcdutl = "etcdutl"

	dirPerm      = 0o755
	binaryPerm   = 0o755
	manifestPerm = 0o644

	importPrefix   = ".import-"
	replacedInfix  = ".replaced-"
	replacedLayout = "20060102T150405Z"
)

// ErrNotFound is wrapped by errors reporting that an etcd version is neither
// in the binary store nor the embedded version.
var ErrNotFound = errors.New("etcd version not found")

// tools lists the binaries a version directory may hold, etcd first.
func tools() []string { return []string{toolEtcd, toolEtcdctl, toolEtcdutl} }

// Store is a versioned etcd binary store rooted at Dir.
type Store struct {
	// Dir is the store directory.
	Dir string
}

// Open returns the store rooted at dir. The directory need not exist yet:
// Import creates it.
func Open(dir string) *Store { return &Store{Dir: dir} }

// Binary describes one etcd version available to Steward.
type Binary struct {
	// Version is the etcd version, e.g. "3.6.16".
	Version string `json:"version"`
	// Path is the etcd server binary (for the embedded version, the steward
	// executable).
	Path string `json:"path"`
	// Tools lists the binaries present, e.g. ["etcd","etcdctl","etcdutl"].
	Tools []string `json:"tools"`
	// Source is SourceStore or SourceEmbedded.
	Source string `json:"source"`
	// ImportedAt is when the version was imported into the store; zero (and
	// omitted) for the embedded version.
	ImportedAt time.Time `json:"importedAt,omitzero"`
}

// Exec is the command line prefix that runs etcd of a version: run Path with
// Args followed by the etcd flags.
type Exec struct {
	// Path is the executable.
	Path string
	// Args come before the etcd flags: empty for a store binary, ["etcd"]
	// for the embedded server.
	Args []string
	// Version is the etcd version, e.g. "3.6.16".
	Version string
	// Embedded is true when Path is the steward executable.
	Embedded bool
}

// manifest is the content of manifest.json.
type manifest struct {
	Version    string            `json:"version"`
	ImportedAt time.Time         `json:"importedAt"`
	Source     string            `json:"source"`
	Files      map[string]string `json:"files"`
}

// EmbeddedVersion returns the version of the etcd server linked into
// Steward, which `steward etcd <etcd flags>` runs.
func EmbeddedVersion() string { return version.Version }

// NormalizeVersion returns s as "3.MINOR.PATCH", accepting a leading "v". It
// rejects anything else, including pre-releases and leading zeros.
func NormalizeVersion(s string) (string, error) {
	if _, _, err := parseVersion(s); err != nil {
		return "", err
	}
	return strings.TrimPrefix(s, "v"), nil
}

// parseVersion returns the minor and patch numbers of a 3.MINOR.PATCH
// version, with or without a leading "v".
func parseVersion(s string) (minor, patch int, err error) {
	bad := func(why string) error {
		return fmt.Errorf("invalid etcd version %q: %s (want 3.MINOR.PATCH, e.g. 3.6.16)", s, why)
	}
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) != 3 {
		return 0, 0, bad("not three dot-separated numbers")
	}
	nums := make([]int, 3)
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return 0, 0, bad(fmt.Sprintf("%q is not a number", p))
		}
		if len(p) > 1 && p[0] == '0' {
			return 0, 0, bad(fmt.Sprintf("%q has a leading zero", p))
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, 0, bad(fmt.Sprintf("%q is not a number", p))
		}
		nums[i] = n
	}
	if nums[0] != 3 {
		return 0, 0, bad("only etcd 3.x is supported")
	}
	return nums[1], nums[2], nil
}

// lessVersion orders normalised versions by semver.
func lessVersion(a, b string) bool {
	amin, apatch, _ := parseVersion(a)
	bmin, bpatch, _ := parseVersion(b)
	if amin != bmin {
		return amin < bmin
	}
	return apatch < bpatch
}

// versionDir returns the directory of a normalised version.
func (s *Store) versionDir(v string) string { return filepath.Join(s.Dir, DirPrefix+v) }

// Tool returns the path of a stored tool (etcd, etcdctl or etcdutl) of a
// version, checked against the SHA-256 its manifest records
// (CheckRecorded); the error wraps ErrNotFound when the store lacks it,
// ErrBinaryChanged when the file is not the one imported.
func (s *Store) Tool(version, name string) (string, error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return "", err
	}
	p := filepath.Join(s.versionDir(v), name)
	if _, err := os.Stat(p); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, derr := os.Stat(s.versionDir(v)); derr == nil {
			return "", fmt.Errorf("etcd %s is in the binary store %s, but without %s: %w", v, s.Dir, name, ErrToolNotFound)
		}
		return "", fmt.Errorf("%s %s is not in the binary store %s (etcd %s is not there at all): %w", name, v, s.Dir, v, ErrToolNotFound)
	}
	// The path is returned to be run: check it against its recorded sum.
	if err := CheckRecorded(p); err != nil {
		return "", err
	}
	return p, nil
}

// ErrToolNotFound: the store lacks a tool (etcdctl, etcdutl) of a version.
// It is also ErrNotFound (errors.Is), but says the tool is missing, not
// the version.
var ErrToolNotFound error = toolNotFound{}

type toolNotFound struct{}

func (toolNotFound) Error() string        { return "tool not in the binary store" }
func (toolNotFound) Is(target error) bool { return target == ErrNotFound }

// Resolve returns how to run etcd of version: the store's binary when
// present, else the steward executable when version is the embedded one.
// Otherwise the error wraps ErrNotFound.
func (s *Store) Resolve(version string) (Exec, error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return Exec{}, fmt.Errorf("resolve etcd: %w", err)
	}
	bin := filepath.Join(s.versionDir(v), toolEtcd)
	fi, err := os.Stat(bin)
	switch {
	case err == nil && fi.Mode().IsRegular():
		return Exec{Path: bin, Version: v}, nil
	case err == nil:
		return Exec{}, fmt.Errorf("resolve etcd %s: %s is not a regular file", v, bin)
	case !errors.Is(err, fs.ErrNotExist):
		return Exec{}, fmt.Errorf("resolve etcd %s: %w", v, err)
	}
	if v == EmbeddedVersion() {
		self, err := os.Executable()
		if err != nil {
			return Exec{}, fmt.Errorf("resolve etcd %s: locate the steward executable: %w", v, err)
		}
		return Exec{Path: self, Args: []string{EmbeddedCommand}, Version: v, Embedded: true}, nil
	}
	return Exec{}, &ProblemError{err: ErrNotFound, Problem: Problem{Kind: KindNotInStore, Version: v, Store: s.Dir,
		Message: fmt.Sprintf("etcd %s is not in the binary store %s and is not the embedded version %s: import it: %v", v, s.Dir, EmbeddedVersion(), ErrNotFound)}}
}

// List returns the versions in the store, plus the embedded version unless
// the store also holds it, sorted by ascending version. A missing store
// directory lists only the embedded version.
func (s *Store) List() ([]Binary, error) {
	versions, err := s.storeVersions()
	if err != nil {
		return nil, err
	}
	var out []Binary
	haveEmbedded := false
	for _, v := range versions {
		if v == EmbeddedVersion() {
			haveEmbedded = true
		}
		b, err := s.describe(v)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if !haveEmbedded {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("list etcd binaries: locate the steward executable: %w", err)
		}
		out = append(out, Binary{
			Version: EmbeddedVersion(),
			Path:    self,
			Tools:   []string{toolEtcd},
			Source:  SourceEmbedded,
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return lessVersion(out[i].Version, out[j].Version) })
	return out, nil
}

// storeVersions returns the normalised versions that have a directory in the
// store, in ascending order. Temporary (.import-*) and set-aside
// (*.replaced-*) directories are ignored.
func (s *Store) storeVersions() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read binary store: %w", err)
	}
	var vs []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, DirPrefix) {
			continue
		}
		v := strings.TrimPrefix(name, DirPrefix)
		if _, _, err := parseVersion(v); err != nil {
			continue
		}
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return lessVersion(vs[i], vs[j]) })
	return vs, nil
}

// describe returns the Binary for a version directory in the store. A
// missing or unreadable manifest leaves ImportedAt zero (Verify reports it).
func (s *Store) describe(v string) (Binary, error) {
	dir := s.versionDir(v)
	b := Binary{Version: v, Path: filepath.Join(dir, toolEtcd), Tools: []string{}, Source: SourceStore}
	for _, t := range tools() {
		fi, err := os.Stat(filepath.Join(dir, t))
		if err == nil && fi.Mode().IsRegular() {
			b.Tools = append(b.Tools, t)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Binary{}, fmt.Errorf("describe etcd %s: %w", v, err)
		}
	}
	if m, err := readManifest(dir); err == nil {
		b.ImportedAt = m.ImportedAt
	}
	return b, nil
}

// readManifest reads dir/manifest.json.
func readManifest(dir string) (manifest, error) {
	var m manifest
	p := filepath.Join(dir, ManifestName)
	data, err := os.ReadFile(p)
	if err != nil {
		return m, fmt.Errorf("read manifest: %w", err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("read manifest %s: %w", p, err)
	}
	if m.Files == nil {
		m.Files = map[string]string{}
	}
	return m, nil
}
