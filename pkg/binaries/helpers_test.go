package binaries

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// testVersion is the etcd version the tests import: it must be built in the
// etcd cache (make etcd-binaries).
const testVersion = "3.6.16"

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// etcdCache returns the directory holding etcd, etcdctl and etcdutl of
// version v ("3.6.16"), from $STEWARD_ETCD_CACHE or <repo>/.cache/etcd. It
// fails the test when they are missing.
func etcdCache(t *testing.T, v string) string {
	t.Helper()
	cache := os.Getenv("STEWARD_ETCD_CACHE")
	if cache == "" {
		cache = filepath.Join(repoRoot(t), ".cache", "etcd")
	}
	dir := filepath.Join(cache, "v"+v)
	for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
		fi, err := os.Stat(filepath.Join(dir, tool))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o100 == 0 {
			t.Fatalf("etcd %s binaries missing from %s (%s: %v): run `make etcd-binaries` (or set STEWARD_ETCD_CACHE)", v, dir, tool, err)
		}
	}
	return dir
}

// sha256File returns the hex SHA-256 of a file.
func sha256File(t *testing.T, p string) string {
	t.Helper()
	sum, err := fileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// tarEntry is one entry of a test tarball: a directory when Dir is set,
// else a regular file copied from From (or holding Data).
type tarEntry struct {
	Name string
	From string
	Data string
	Dir  bool
}

// writeTarball writes a gzipped tarball of entries to p.
func writeTarball(t *testing.T, p string, entries []tarEntry) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		switch {
		case e.Dir:
			err = tw.WriteHeader(&tar.Header{Name: e.Name, Typeflag: tar.TypeDir, Mode: 0o755})
		case e.From != "":
			var in *os.File
			if in, err = os.Open(e.From); err != nil {
				break
			}
			fi, _ := in.Stat()
			if err = tw.WriteHeader(&tar.Header{Name: e.Name, Typeflag: tar.TypeReg, Mode: 0o755, Size: fi.Size()}); err == nil {
				_, err = io.Copy(tw, in)
			}
			in.Close()
		default:
			if err = tw.WriteHeader(&tar.Header{Name: e.Name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.Data))}); err == nil {
				_, err = tw.Write([]byte(e.Data))
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

// releaseTarball builds, in a temp dir, a tarball of version v in the
// official layout (etcd-vX.Y.Z-linux-amd64/{etcd,etcdctl,README.md}) from
// the binaries in binDir, and returns its path and SHA-256.
func releaseTarball(t *testing.T, binDir, v string) (string, string) {
	t.Helper()
	top := "etcd-v" + v + "-linux-amd64"
	p := filepath.Join(t.TempDir(), top+".tar.gz")
	writeTarball(t, p, []tarEntry{
		{Name: top + "/", Dir: true},
		{Name: top + "/README.md", Data: "etcd release\n"},
		{Name: top + "/Documentation/", Dir: true},
		{Name: top + "/Documentation/etcd", Data: "not a binary: nested entries are ignored\n"},
		{Name: top + "/etcd", From: filepath.Join(binDir, "etcd")},
		{Name: top + "/etcdctl", From: filepath.Join(binDir, "etcdctl")},
	})
	return p, sha256File(t, p)
}

// copyBinaries copies etcd, etcdctl and etcdutl from src into a new temp
// directory named name and returns it.
func copyBinaries(t *testing.T, src, name string, tools ...string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		in, err := os.Open(filepath.Join(src, tool))
		if err != nil {
			t.Fatal(err)
		}
		_, err = writeBinary(filepath.Join(dst, tool), in)
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// appendByte appends one byte to a file (an ELF binary keeps running).
func appendByte(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshot returns every path under dir (relative) with the hex SHA-256 of
// regular files, to check that a failed operation changed nothing.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type().IsRegular() {
			sum, err := fileSHA256(p)
			if err != nil {
				return err
			}
			rel += " " + sum
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// assertSnapshot fails when dir differs from an earlier snapshot.
func assertSnapshot(t *testing.T, dir string, before []string) {
	t.Helper()
	after := snapshot(t, dir)
	if len(after) != len(before) {
		t.Fatalf("store changed:\nbefore %v\nafter  %v", before, after)
	}
	for i := range after {
		if after[i] != before[i] {
			t.Fatalf("store changed:\nbefore %v\nafter  %v", before, after)
		}
	}
}
