package binaries

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets of this file read tarballs: a release tarball given to
// `steward binaries import`, and a bundle another machine pushes to an
// agent (PUT /v1/binaries/VERSION). Their binaries are small fake files
// (never executable content: see executableContent), so a fuzzed input
// never runs a program.

// fuzzTarEntry is one entry of a fuzz seed tarball.
type fuzzTarEntry struct {
	name string
	typ  byte
	data string
}

// fuzzTar writes an uncompressed tarball of entries.
func fuzzTar(tb testing.TB, entries ...fuzzTarEntry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: 0o755, Typeflag: typ}
		switch typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = e.data
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// executableContent reports whether a tar stream holds an entry a kernel
// would run (a script or an ELF file): such inputs are skipped, so that a
// fuzzed bundle that passes every check never runs as `etcd --version`.
func executableContent(data []byte) bool {
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		if _, err := tr.Next(); err != nil {
			return false
		}
		head := make([]byte, 4)
		n, _ := io.ReadFull(tr, head)
		if bytes.HasPrefix(head[:n], []byte("#!")) || bytes.HasPrefix(head[:n], []byte("\x7fELF")) {
			return true
		}
	}
}

// tree lists every path under root (relative, slash-separated, directories
// with a trailing slash) with its mode type.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			rel += "/"
		} else if !d.Type().IsRegular() {
			rel += " (" + d.Type().String() + ")"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzExtractTarball extracts arbitrary tarballs (the input is the tar
// stream; it is gzipped unless it already starts with gzip's magic).
// Properties: nothing is written outside the extraction directory, and in
// it only the etcd tools as regular files, at its top level; on success
// the returned sums are those of the files written and etcd is there; on
// an error, Store.Import of the same tarball refuses with that error and
// leaves its store empty (its temporary directory removed).
func FuzzExtractTarball(f *testing.F) {
	top := "etcd-v3.6.16-linux-amd64/"
	f.Add(fuzzTar(f,
		fuzzTarEntry{name: top, typ: tar.TypeDir},
		fuzzTarEntry{name: top + "README.md", data: "etcd release\n"},
		fuzzTarEntry{name: top + "Documentation/", typ: tar.TypeDir},
		fuzzTarEntry{name: top + "Documentation/etcd", data: "nested: ignored\n"},
		fuzzTarEntry{name: top + "etcd", data: "fake etcd\n"},
		fuzzTarEntry{name: top + "etcdctl", data: "fake etcdctl\n"},
		fuzzTarEntry{name: top + "etcdutl", data: "fake etcdutl\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: "etcd", data: "fake etcd\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: "../etcd", data: "escape\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: "/tmp/etcd", data: "absolute\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: top + "etcd", typ: tar.TypeSymlink, data: "/bin/sh"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: "etcd", data: "a"}, fuzzTarEntry{name: "./etcd", data: "b"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if executableContent(data) {
			return
		}
		root := t.TempDir()
		src := filepath.Join(root, "src", "etcd-v3.6.16-linux-amd64.tar.gz")
		dst := filepath.Join(root, "dst")
		for _, d := range []string{filepath.Dir(src), dst} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		gz := data
		if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(data)
			_ = zw.Close()
			gz = buf.Bytes()
		}
		if err := os.WriteFile(src, gz, 0o600); err != nil {
			t.Fatal(err)
		}
		files, err := extractTarball(src, dst)
		for _, p := range tree(t, root) {
			name, inDst := strings.CutPrefix(p, "dst/")
			switch {
			case p == "src/" || p == "src/etcd-v3.6.16-linux-amd64.tar.gz" || p == "dst/":
			case inDst && slices.Contains(tools(), name):
			default:
				t.Fatalf("extraction wrote %s (error %v)", p, err)
			}
		}
		if err == nil {
			if files[toolEtcd] == "" {
				t.Fatalf("success without etcd: %v", files)
			}
			entries, _ := os.ReadDir(dst)
			if len(entries) != len(files) {
				t.Fatalf("%d files written, %d sums returned", len(entries), len(files))
			}
			for name, sum := range files {
				b, err := os.ReadFile(filepath.Join(dst, name))
				if err != nil {
					t.Fatal(err)
				}
				if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sum {
					t.Fatalf("%s: sum %s returned for other content", name, sum)
				}
			}
			return // Import would run the extracted etcd: not with fuzzed bytes
		}
		store := Open(filepath.Join(root, "store"))
		if _, ierr := store.Import(t.Context(), src, ImportOptions{}); ierr == nil || !strings.Contains(ierr.Error(), err.Error()) {
			t.Fatalf("extraction failed with %v, Import returned %v", err, ierr)
		}
		if left := tree(t, store.Dir); len(left) > 0 {
			t.Fatalf("a refused import left %v in the store", left)
		}
	})
}

// fuzzBundle is a bundle as WriteBundle writes it (manifest first, then
// each file its manifest lists) for fake binaries.
func fuzzBundle(tb testing.TB, version string, files map[string]string) []byte {
	tb.Helper()
	sums := map[string]string{}
	for name, data := range files {
		s := sha256.Sum256([]byte(data))
		sums[name] = hex.EncodeToString(s[:])
	}
	head, err := json.Marshal(BundleManifest{Version: version, Files: sums, Source: "/s/.cache/etcd/v" + version})
	if err != nil {
		tb.Fatal(err)
	}
	entries := []fuzzTarEntry{{name: BundleManifestName, data: string(head)}}
	for _, t := range tools() {
		if data, ok := files[t]; ok {
			entries = append(entries, fuzzTarEntry{name: t, data: data})
		}
	}
	return fuzzTar(tb, entries...)
}

// FuzzReceive feeds arbitrary bundles to Store.Receive (what an agent does
// with PUT /v1/binaries/3.6.16). Property: every fuzzed bundle is refused
// (its etcd is never a real one), and a refusal leaves the store exactly
// as it was: empty, without a temporary directory, nothing written beside
// it.
func FuzzReceive(f *testing.F) {
	f.Add(fuzzBundle(f, "3.6.16", map[string]string{"etcd": "fake etcd\n", "etcdctl": "fake etcdctl\n", "etcdutl": "fake etcdutl\n"}))
	f.Add(fuzzBundle(f, "3.6.16", map[string]string{"etcd": "fake etcd\n"}))
	f.Add(fuzzBundle(f, "3.5.35", map[string]string{"etcd": "other version\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: "etcd", data: "no manifest\n"}))
	f.Add(fuzzTar(f, fuzzTarEntry{name: BundleManifestName, data: `{"version":"3.6.16","files":{"../etcd":"` + strings.Repeat("0", 64) + `"}}`}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if executableContent(data) {
			return
		}
		root := t.TempDir()
		store := Open(filepath.Join(root, "store"))
		if _, _, err := store.Receive(t.Context(), "3.6.16", bytes.NewReader(data)); err == nil {
			t.Fatalf("a bundle of fake binaries was stored")
		}
		for _, p := range tree(t, root) {
			if p != "store/" {
				t.Fatalf("a refused bundle left %s", p)
			}
		}
	})
}
