package binaries

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A bundle carries one stored version from one store to another (a
// coordinator pushing it to a host's agent): an uncompressed tar stream
// whose first entry is BundleManifestName, the JSON of BundleManifest (the
// version and the SHA-256 of each file, from the sending store's manifest),
// followed by each file it lists, as a regular file named etcd, etcdctl or
// etcdutl (WriteBundle sends them in that order), each once. No other entry
// is allowed. WriteBundle writes one,
// Receive checks and stores one.
const (
	// BundleManifestName is the first entry of a bundle.
	BundleManifestName = "bundle.json"
	// MaxBundleFileSize bounds each file of a received bundle (etcd is
	// about 25 MiB).
	MaxBundleFileSize = 256 << 20
	// MaxBundleSize bounds a whole bundle: every tool at its largest and
	// room for the manifest and tar headers.
	MaxBundleSize = 3*MaxBundleFileSize + 1<<20

	maxBundleManifest = 64 << 10
	sourcePushPrefix  = "push: "
)

// ErrBadBundle is wrapped by Receive's refusals of a bundle that is not
// well formed, misses a file, or holds the wrong version.
var ErrBadBundle = errors.New("bad binary bundle")

// BundleManifest is the first entry of a bundle.
type BundleManifest struct {
	// Version is the etcd version, "3.6.16".
	Version string `json:"version"`
	// Files maps each file of the bundle to its hex SHA-256; it holds
	// etcd, and etcdctl and etcdutl when the version has them.
	Files map[string]string `json:"files"`
	// Source is where the sending store got the version (its manifest's
	// source), for the receiving store's manifest.
	Source string `json:"source,omitempty"`
}

// Sums returns the SHA-256 of each file of a stored version, from its
// manifest. The error wraps ErrNotFound when the store lacks the version
// (the embedded version too: it has no stored files).
func (s *Store) Sums(version string) (map[string]string, error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return nil, err
	}
	dir := s.versionDir(v)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("etcd %s is not in the binary store %s: %w", v, s.Dir, ErrNotFound)
	}
	m, err := readManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("etcd %s in %s: %w", v, s.Dir, err)
	}
	if m.Files[toolEtcd] == "" {
		return nil, fmt.Errorf("etcd %s in %s: the manifest lists no etcd", v, s.Dir)
	}
	return m.Files, nil
}

// WriteBundle writes the bundle of a stored version to w and returns the
// number of bytes written. It sends what the store's manifest lists; the
// receiver checks every file against the manifest's sums (Verify the
// version first to fail here rather than there).
func (s *Store) WriteBundle(w io.Writer, version string) (int64, error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return 0, err
	}
	dir := s.versionDir(v)
	m, err := readManifest(dir)
	if err != nil {
		return 0, fmt.Errorf("etcd %s in %s: %w", v, s.Dir, err)
	}
	for name := range m.Files {
		if !slices.Contains(tools(), name) {
			return 0, fmt.Errorf("etcd %s in %s: the manifest lists unexpected file %q", v, s.Dir, name)
		}
	}
	cw := &countWriter{w: w}
	tw := tar.NewWriter(cw)
	head, err := json.Marshal(BundleManifest{Version: v, Files: m.Files, Source: strings.TrimPrefix(m.Source, sourcePushPrefix)})
	if err != nil {
		return cw.n, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: BundleManifestName, Mode: manifestPerm, Size: int64(len(head)), Typeflag: tar.TypeReg}); err != nil {
		return cw.n, err
	}
	if _, err := tw.Write(head); err != nil {
		return cw.n, err
	}
	for _, t := range tools() {
		if _, ok := m.Files[t]; !ok {
			continue
		}
		if err := writeBundleFile(tw, filepath.Join(dir, t), t); err != nil {
			return cw.n, err
		}
	}
	return cw.n, tw.Close()
}

// writeBundleFile adds the regular file p as the entry name.
func writeBundleFile(tw *tar.Writer, p, name string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: binaryPerm, Size: fi.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("send %s: %w", p, err)
	}
	return nil
}

// recordReader remembers the first error of reading r other than EOF.
type recordReader struct {
	r   io.Reader
	err error
}

func (rr *recordReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	if err != nil && err != io.EOF && rr.err == nil {
		rr.err = err
	}
	return n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Receive stores the version a bundle read from r carries (WriteBundle's
// format): each file is written into a temporary directory inside the
// store and checked against the SHA-256 the bundle's manifest gives, etcd
// must report the version, and only then is the directory renamed into
// place with a manifest of the store's format. version is what the sender
// claims: the bundle must carry it.
//
// A refusal leaves the store as it was (the temporary directory is
// removed): a malformed bundle or one of another version (ErrBadBundle), a
// file whose sum differs (ErrChecksumMismatch), a different etcd stored
// under the version (ErrDifferentBinary), or a stored copy of the same etcd
// that fails verification (ErrDamaged). A verified stored copy of the same
// etcd makes Receive a no-op: installed is false.
func (s *Store) Receive(ctx context.Context, version string, r io.Reader) (b Binary, installed bool, err error) {
	return s.receive(ctx, version, r, false)
}

// ReceiveReplacing is Receive that replaces a different etcd stored under
// the version, or a damaged copy of the same one, instead of refusing it:
// the stored directory is moved aside (etcd-vX.Y.Z.replaced-TIME) only
// once the pushed copy is checked, and the pushed one renamed into place.
// A coordinator pushing with replacement brings a host's copy in step with
// its own.
func (s *Store) ReceiveReplacing(ctx context.Context, version string, r io.Reader) (b Binary, installed bool, err error) {
	return s.receive(ctx, version, r, true)
}

func (s *Store) receive(ctx context.Context, version string, r io.Reader, replace bool) (b Binary, installed bool, err error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return Binary{}, false, fmt.Errorf("receive etcd: %w: %w", ErrBadBundle, err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("receive etcd %s: %w", v, err)
		}
	}()
	// A failed write is the bundle's fault when reading it failed.
	rr := &recordReader{r: r}
	tr := tar.NewReader(rr)
	m, err := readBundleManifest(tr, v)
	if err != nil {
		return Binary{}, false, err
	}

	if err := os.MkdirAll(s.Dir, dirPerm); err != nil {
		return Binary{}, false, fmt.Errorf("create binary store: %w", err)
	}
	tmp, err := os.MkdirTemp(s.Dir, importPrefix+"*")
	if err != nil {
		return Binary{}, false, fmt.Errorf("create temporary directory: %w", err)
	}
	// After a successful rename tmp no longer exists and this is a no-op.
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, dirPerm); err != nil {
		return Binary{}, false, err
	}

	got := map[string]string{}
	for {
		if err := ctx.Err(); err != nil {
			return Binary{}, false, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Binary{}, false, fmt.Errorf("%w: read: %w", ErrBadBundle, err)
		}
		name := hdr.Name
		want, listed := m.Files[name]
		switch {
		case !listed:
			return Binary{}, false, fmt.Errorf("%w: entry %q is not a file its manifest lists (%s)", ErrBadBundle, name, strings.Join(sortedKeys(m.Files), ", "))
		case got[name] != "":
			return Binary{}, false, fmt.Errorf("%w: %s is sent twice", ErrBadBundle, name)
		case hdr.Typeflag != tar.TypeReg:
			return Binary{}, false, fmt.Errorf("%w: %s is not a regular file", ErrBadBundle, name)
		case hdr.Size > MaxBundleFileSize:
			return Binary{}, false, fmt.Errorf("%w: %s is %d bytes, above the limit of %d", ErrBadBundle, name, hdr.Size, MaxBundleFileSize)
		}
		sum, err := writeBinary(filepath.Join(tmp, name), tr)
		if err != nil && (rr.err != nil || errors.Is(err, io.ErrUnexpectedEOF)) {
			return Binary{}, false, fmt.Errorf("%w: read %s: %w", ErrBadBundle, name, err)
		}
		if err != nil {
			return Binary{}, false, fmt.Errorf("write %s: %w", name, err)
		}
		if sum != want {
			return Binary{}, false, fmt.Errorf("%w for %s: the sender's manifest says %s, the received file has %s; nothing was stored",
				ErrChecksumMismatch, name, want, sum)
		}
		got[name] = sum
	}
	for _, t := range sortedKeys(m.Files) {
		if got[t] == "" {
			return Binary{}, false, fmt.Errorf("%w: the bundle ends without %s, which its manifest lists", ErrBadBundle, t)
		}
	}

	reported, err := runVersion(ctx, filepath.Join(tmp, toolEtcd))
	if err != nil {
		return Binary{}, false, err
	}
	if reported != v {
		return Binary{}, false, fmt.Errorf("%w: sent as etcd %s but the binary reports etcd Version: %s", ErrBadBundle, v, reported)
	}
	source := "push"
	if m.Source != "" {
		source = sourcePushPrefix + m.Source
	}
	return s.install(ctx, tmp, v, source, got, installOptions{verifyExisting: true, force: replace})
}

// readBundleManifest reads and checks a bundle's first entry.
func readBundleManifest(tr *tar.Reader, v string) (BundleManifest, error) {
	var m BundleManifest
	hdr, err := tr.Next()
	if err != nil {
		return m, fmt.Errorf("%w: read its manifest: %w", ErrBadBundle, err)
	}
	if hdr.Name != BundleManifestName || hdr.Typeflag != tar.TypeReg {
		return m, fmt.Errorf("%w: the first entry is %q, want the manifest %s", ErrBadBundle, hdr.Name, BundleManifestName)
	}
	if hdr.Size > maxBundleManifest {
		return m, fmt.Errorf("%w: its manifest is %d bytes, above the limit of %d", ErrBadBundle, hdr.Size, maxBundleManifest)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return m, fmt.Errorf("%w: read its manifest: %w", ErrBadBundle, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: its manifest: %w", ErrBadBundle, err)
	}
	if mv, err := NormalizeVersion(m.Version); err != nil || mv != v {
		return m, fmt.Errorf("%w: its manifest is for etcd %q, the request for %s", ErrBadBundle, m.Version, v)
	}
	if m.Files[toolEtcd] == "" {
		return m, fmt.Errorf("%w: its manifest lists no etcd", ErrBadBundle)
	}
	for name, sum := range m.Files {
		if !slices.Contains(tools(), name) {
			return m, fmt.Errorf("%w: its manifest lists %q, which is not one of %s", ErrBadBundle, name, strings.Join(tools(), ", "))
		}
		norm, err := normalizeSHA(sum)
		if err != nil {
			return m, fmt.Errorf("%w: %s: %w", ErrBadBundle, name, err)
		}
		m.Files[name] = norm
	}
	return m, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
