package binaries

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// maxBinarySize bounds each binary read from a tarball, against
// decompression bombs.
const maxBinarySize = 1 << 30

// ImportOptions tune Store.Import.
type ImportOptions struct {
	// Version is the etcd version being imported ("3.6.16" or "v3.6.16").
	// When empty it is deduced from the name of the source
	// (etcd-v3.6.16-linux-amd64.tar.gz, etcd-v3.6.16, v3.6.16).
	Version string
	// SHA256 is the expected hex SHA-256 of the tarball, or of the etcd
	// binary when importing a directory. Empty skips the check.
	SHA256 string
	// Force replaces a different binary already stored under the version;
	// the old directory is moved aside, never deleted.
	Force bool
}

// Refusals of Import a command can turn into advice about its flags
// (errors.Is).
var (
	// ErrUnknownVersion: no version was claimed and the name of the source
	// does not tell it (ImportOptions.Version names it).
	ErrUnknownVersion = errors.New("cannot tell the etcd version")
	// ErrDifferentBinary: the store holds another etcd binary under the
	// version being imported (ImportOptions.Force replaces it, keeping the
	// old directory aside).
	ErrDifferentBinary = errors.New("a different etcd binary is stored under this version")
	// ErrChecksumMismatch: a file's SHA-256 is not the one expected.
	ErrChecksumMismatch = errors.New("sha256 mismatch")
	// ErrDamaged: the store holds the same etcd under the version, but
	// that copy fails verification (Receive does not call it a no-op).
	ErrDamaged = errors.New("the stored copy is damaged")
)

// Import copies etcd (and etcdctl and etcdutl when present) from src into
// the store. src is a directory holding the binaries or an official release
// tarball (etcd-vX.Y.Z-linux-amd64.tar.gz). The copy is checked with
// `etcd --version` against the claimed version before it becomes visible.
// Importing a binary identical to the stored one is a no-op that returns the
// stored entry.
func (s *Store) Import(ctx context.Context, src string, opt ImportOptions) (Binary, error) {
	src, tarball, err := classifySource(src)
	if err != nil {
		return Binary{}, fmt.Errorf("import etcd from %s: %w", src, err)
	}
	v, err := importVersion(src, opt.Version)
	if err != nil {
		return Binary{}, fmt.Errorf("import etcd from %s: %w", src, err)
	}
	b, err := s.doImport(ctx, src, tarball, v, opt)
	if err != nil {
		return Binary{}, fmt.Errorf("import etcd %s: %w", v, err)
	}
	return b, nil
}

// importVersion returns the normalised version to import: the claimed one,
// else one deduced from the name of src.
func importVersion(src, claimed string) (string, error) {
	if claimed != "" {
		return NormalizeVersion(claimed)
	}
	if v, ok := versionFromName(filepath.Base(filepath.Clean(src))); ok {
		return v, nil
	}
	return "", fmt.Errorf("%w from the name %q", ErrUnknownVersion, filepath.Base(src))
}

// versionFromName deduces a version from names like
// etcd-v3.6.16-linux-amd64.tar.gz, etcd-v3.6.16 or v3.6.16.
func versionFromName(name string) (string, bool) {
	name = strings.TrimPrefix(name, "etcd-")
	if !strings.HasPrefix(name, "v") {
		return "", false
	}
	for _, ext := range []string{".tar.gz", ".tgz"} {
		name = strings.TrimSuffix(name, ext)
	}
	name, _, _ = strings.Cut(name, "-")
	v, err := NormalizeVersion(name)
	return v, err == nil
}

// isTarball reports whether name looks like a gzipped tarball.
func isTarball(name string) bool {
	return strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz")
}

// classifySource returns the absolute path of src and whether it is a
// tarball (else it is a directory).
func classifySource(src string) (string, bool, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return src, false, err
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return abs, false, err
	case fi.IsDir():
		return abs, false, nil
	case fi.Mode().IsRegular() && isTarball(abs):
		return abs, true, nil
	}
	return abs, false, errors.New("the source is neither a directory nor a .tar.gz release tarball")
}

// doImport does the work of Import: src is absolute, a tarball or a
// directory, and v is the normalised version.
func (s *Store) doImport(ctx context.Context, src string, tarball bool, v string, opt ImportOptions) (Binary, error) {
	var err error
	want := ""
	if opt.SHA256 != "" {
		if want, err = normalizeSHA(opt.SHA256); err != nil {
			return Binary{}, err
		}
		// Check before anything is written to the store.
		what, p := "etcd binary", filepath.Join(src, toolEtcd)
		if tarball {
			what, p = "tarball", src
		}
		got, err := fileSHA256(p)
		if err != nil {
			return Binary{}, fmt.Errorf("checksum %s: %w", what, err)
		}
		if got != want {
			return Binary{}, fmt.Errorf("%w for %s %s: expected %s, got %s", ErrChecksumMismatch, what, p, want, got)
		}
	}

	if err := os.MkdirAll(s.Dir, dirPerm); err != nil {
		return Binary{}, fmt.Errorf("create binary store: %w", err)
	}
	tmp, err := os.MkdirTemp(s.Dir, importPrefix+"*")
	if err != nil {
		return Binary{}, fmt.Errorf("create temporary directory: %w", err)
	}
	// After a successful rename tmp no longer exists and this is a no-op.
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, dirPerm); err != nil {
		return Binary{}, err
	}

	var files map[string]string
	if tarball {
		files, err = extractTarball(src, tmp)
	} else {
		files, err = copyDir(src, tmp)
		if err == nil && want != "" && files[toolEtcd] != want {
			err = fmt.Errorf("%w for etcd binary %s: expected %s, got %s (did it change during the import?)",
				ErrChecksumMismatch, filepath.Join(src, toolEtcd), want, files[toolEtcd])
		}
	}
	if err != nil {
		return Binary{}, err
	}

	got, err := runVersion(ctx, filepath.Join(tmp, toolEtcd))
	if err != nil {
		return Binary{}, err
	}
	if got != v {
		return Binary{}, fmt.Errorf("claimed version %s but the binary reports etcd Version: %s", v, got)
	}

	b, _, err := s.install(ctx, tmp, v, src, files, installOptions{force: opt.Force})
	return b, err
}

// installOptions tune Store.install.
type installOptions struct {
	// force sets a different stored copy aside instead of refusing.
	force bool
	// verifyExisting checks a stored copy of the same etcd sum before
	// calling the install a no-op: a damaged one is refused (ErrDamaged).
	verifyExisting bool
}

// install writes the manifest of the staged version directory tmp (whose
// files were checked: files are their sums) and renames it into place as
// version v. A stored copy with the same etcd sum makes it a no-op
// (installed false); a different one is refused unless forced. tmp is left
// for the caller to remove when it was not renamed.
func (s *Store) install(ctx context.Context, tmp, v, source string, files map[string]string, opt installOptions) (Binary, bool, error) {
	m := manifest{Version: v, ImportedAt: time.Now().UTC().Truncate(time.Second), Source: source, Files: files}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Binary{}, false, err
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, ManifestName), append(data, '\n'), manifestPerm); err != nil {
		return Binary{}, false, err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return Binary{}, false, err
	}

	dest := s.versionDir(v)
	for attempt := 0; ; attempt++ {
		restore := ""
		switch _, err := os.Lstat(dest); {
		case err == nil:
			old, rerr := readManifest(dest)
			oldSum := old.Files[toolEtcd]
			same := rerr == nil && oldSum == files[toolEtcd]
			if same {
				var problems []string
				if opt.verifyExisting {
					problems = s.check(ctx, v, dest)
				}
				if len(problems) == 0 {
					b, err := s.describe(v)
					return b, false, err
				}
				if !opt.force {
					return Binary{}, false, fmt.Errorf("%w: %s holds the same etcd (sha256 %s) but fails verification: %s; move it aside and try again",
						ErrDamaged, dest, oldSum, strings.Join(problems, "; "))
				}
				// Forced over a damaged copy of the same etcd: replace it.
			}
			if oldSum == "" {
				oldSum = "unknown"
			}
			if !same && !opt.force {
				return Binary{}, false, fmt.Errorf("%w: %s holds etcd sha256 %s, importing %s", ErrDifferentBinary, dest, oldSum, files[toolEtcd])
			}
			if restore, err = s.setAside(dest); err != nil {
				return Binary{}, false, err
			}
		case !errors.Is(err, fs.ErrNotExist):
			return Binary{}, false, err
		}
		if err := os.Rename(tmp, dest); err != nil {
			if restore != "" {
				if rerr := os.Rename(restore, dest); rerr != nil {
					err = fmt.Errorf("%w (and restoring %s failed: %v)", err, restore, rerr)
				}
			}
			// Another import of this version got there between the check
			// and the rename: compare with what it installed, once.
			if _, lerr := os.Lstat(dest); restore == "" && lerr == nil && attempt == 0 {
				continue
			}
			return Binary{}, false, fmt.Errorf("install %s: %w", dest, err)
		}
		break
	}
	if err := atomicfile.SyncDir(s.Dir); err != nil {
		return Binary{}, false, err
	}
	b, err := s.describe(v)
	return b, true, err
}

// setAside renames dest to dest.replaced-<UTC timestamp> and returns the new
// name.
func (s *Store) setAside(dest string) (string, error) {
	base := dest + replacedInfix + time.Now().UTC().Format(replacedLayout)
	aside := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, fs.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(dest, aside); err != nil {
		return "", fmt.Errorf("move %s aside: %w", dest, err)
	}
	return aside, nil
}

// normalizeSHA validates a hex SHA-256 and returns it in lower case.
func normalizeSHA(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if b, err := hex.DecodeString(s); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("invalid sha256 %q: want 64 hex digits", s)
	}
	return s, nil
}

// fileSHA256 returns the hex SHA-256 of a file.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyDir copies the etcd tools found in src into dst and returns their
// sums. etcd is required; etcdctl and etcdutl are optional.
func copyDir(src, dst string) (map[string]string, error) {
	files := map[string]string{}
	for _, t := range tools() {
		p := filepath.Join(src, t)
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if t == toolEtcd {
				return nil, fmt.Errorf("%s has no etcd binary", src)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sum, err := writeBinary(filepath.Join(dst, t), f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", p, err)
		}
		files[t] = sum
	}
	return files, nil
}

// extractTarball extracts the etcd tools from a release tarball into dst and
// returns their sums. Tools are taken from the top level or from the single
// release directory (etcd-vX.Y.Z-linux-amd64/); other entries are skipped.
// Entries with absolute paths or ".." are rejected.
func extractTarball(src, dst string) (map[string]string, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read tarball %s: %w", src, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read tarball %s: %w", src, err)
		}
		name := hdr.Name
		if path.IsAbs(name) || strings.HasPrefix(name, `\`) || filepath.IsAbs(name) {
			return nil, fmt.Errorf("tarball %s: entry %q has an absolute path", src, name)
		}
		if slices.Contains(strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }), "..") {
			return nil, fmt.Errorf("tarball %s: entry %q contains \"..\"", src, name)
		}
		parts := strings.Split(path.Clean(name), "/")
		base := parts[len(parts)-1]
		if len(parts) > 2 || !slices.Contains(tools(), base) || hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("tarball %s: %s is not a regular file", src, name)
		}
		if _, dup := files[base]; dup {
			return nil, fmt.Errorf("tarball %s: more than one %s", src, base)
		}
		if hdr.Size > maxBinarySize {
			return nil, fmt.Errorf("tarball %s: %s is implausibly large (%d bytes)", src, name, hdr.Size)
		}
		sum, err := writeBinary(filepath.Join(dst, base), tr)
		if err != nil {
			return nil, fmt.Errorf("extract %s from %s: %w", name, src, err)
		}
		files[base] = sum
	}
	if _, ok := files[toolEtcd]; !ok {
		return nil, fmt.Errorf("tarball %s has no etcd binary (want etcd or etcd-vX.Y.Z-linux-amd64/etcd)", src)
	}
	return files, nil
}

// writeBinary creates dst (mode 0755) from r, syncs it and returns its hex
// SHA-256.
func writeBinary(dst string, r io.Reader) (string, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, binaryPerm)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), r)
	if err == nil {
		err = out.Chmod(binaryPerm)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
