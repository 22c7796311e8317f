package binaries

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bundleEntry is one entry of a hand-made bundle: Data, else the file From.
type bundleEntry struct {
	Name string
	From string
	Data []byte
	Type byte // tar.TypeReg when zero
}

// makeBundle writes a bundle of entries (the manifest is one of them, or
// absent) by hand, for bundles WriteBundle would never write.
func makeBundle(t *testing.T, entries ...bundleEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		data := e.Data
		if e.From != "" {
			var err error
			if data, err = os.ReadFile(e.From); err != nil {
				t.Fatal(err)
			}
		}
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.Name, Mode: 0o755, Typeflag: typ}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(data))
		}
		if typ == tar.TypeSymlink {
			hdr.Linkname = "/bin/sh"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write(data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// manifestEntry is the bundle manifest entry for m.
func manifestEntry(t *testing.T, m BundleManifest) bundleEntry {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bundleEntry{Name: BundleManifestName, Data: b}
}

// sentStore returns a store holding testVersion imported from the etcd
// cache, and the bundle it writes.
func sentStore(t *testing.T) (*Store, []byte) {
	t.Helper()
	src := Open(t.TempDir())
	if _, err := src.Import(context.Background(), etcdCache(t, testVersion), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := src.WriteBundle(&buf, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteBundle returned %d bytes, wrote %d", n, buf.Len())
	}
	return src, buf.Bytes()
}

// TestReceive: a bundle lands as a verified version with the sender's
// sums; the same bundle again is a no-op; the files are what was sent.
func TestReceive(t *testing.T) {
	ctx := context.Background()
	src, bundle := sentStore(t)
	cache := etcdCache(t, testVersion)
	dst := Open(filepath.Join(t.TempDir(), "binaries")) // made by Receive
	b, installed, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle))
	if err != nil || !installed {
		t.Fatalf("Receive = %+v, %v, %v", b, installed, err)
	}
	if b.Version != testVersion || b.Source != SourceStore || strings.Join(b.Tools, ",") != "etcd,etcdctl,etcdutl" ||
		b.Path != filepath.Join(dst.Dir, "etcd-v"+testVersion, "etcd") {
		t.Fatalf("Receive = %+v", b)
	}
	if res, err := dst.Verify(ctx, testVersion); err != nil || !res.OK {
		t.Fatalf("Verify after Receive = %+v, %v", res, err)
	}
	want, err := src.Sums(testVersion)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.Sums(testVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools() {
		if got[tool] != want[tool] || got[tool] != sha256File(t, filepath.Join(cache, tool)) {
			t.Errorf("%s: received sum %s, sent %s", tool, got[tool], want[tool])
		}
	}
	m, err := readManifest(filepath.Join(dst.Dir, "etcd-v"+testVersion))
	if err != nil || m.Source != "push: "+cache {
		t.Errorf("manifest %+v, %v: want source %q", m, err, "push: "+cache)
	}
	if left, _ := filepath.Glob(filepath.Join(dst.Dir, ".import-*")); len(left) > 0 {
		t.Errorf("temporary directories left: %v", left)
	}

	// The same bundle again changes nothing.
	before := snapshot(t, dst.Dir)
	again, installed, err := dst.Receive(ctx, "v"+testVersion, bytes.NewReader(bundle))
	if err != nil || installed || again.Path != b.Path {
		t.Fatalf("second Receive = %+v, installed %v, %v; want a no-op", again, installed, err)
	}
	assertSnapshot(t, dst.Dir, before)

	// A pushed version pushes on, naming where it first came from.
	var buf bytes.Buffer
	if _, err := dst.WriteBundle(&buf, testVersion); err != nil {
		t.Fatal(err)
	}
	third := Open(t.TempDir())
	if _, _, err := third.Receive(ctx, testVersion, &buf); err != nil {
		t.Fatal(err)
	}
	if m, err := readManifest(filepath.Join(third.Dir, "etcd-v"+testVersion)); err != nil || m.Source != "push: "+cache {
		t.Errorf("manifest %+v, %v: want source %q", m, err, "push: "+cache)
	}
}

// TestReceiveRefusals: every refused bundle names what is wrong, wraps
// its kind, and leaves the store as it was, with no temporary directory.
func TestReceiveRefusals(t *testing.T) {
	ctx := context.Background()
	cache := etcdCache(t, testVersion)
	src, good := sentStore(t)
	sums, err := src.Sums(testVersion)
	if err != nil {
		t.Fatal(err)
	}
	bin := func(tool string) string { return filepath.Join(cache, tool) }
	with := func(edit func(m *BundleManifest)) bundleEntry {
		m := BundleManifest{Version: testVersion, Files: map[string]string{}}
		for k, v := range sums {
			m.Files[k] = v
		}
		edit(&m)
		return manifestEntry(t, m)
	}
	same := with(func(*BundleManifest) {})
	tampered, err := os.ReadFile(bin("etcdctl"))
	if err != nil {
		t.Fatal(err)
	}
	tampered = append(tampered, 0)
	zero := strings.Repeat("0", 64)

	tests := []struct {
		name    string
		version string
		bundle  []byte
		is      error
		want    string
	}{
		{"a file's sum differs from the manifest", testVersion,
			makeBundle(t, with(func(m *BundleManifest) { m.Files["etcdutl"] = zero }), bundleEntry{Name: "etcd", From: bin("etcd")},
				bundleEntry{Name: "etcdctl", From: bin("etcdctl")}, bundleEntry{Name: "etcdutl", From: bin("etcdutl")}),
			ErrChecksumMismatch, "sha256 mismatch for etcdutl: the sender's manifest says " + zero + ", the received file has " + sums["etcdutl"]},
		{"a file changed on the way", testVersion,
			makeBundle(t, same, bundleEntry{Name: "etcd", From: bin("etcd")}, bundleEntry{Name: "etcdctl", Data: tampered},
				bundleEntry{Name: "etcdutl", From: bin("etcdutl")}),
			ErrChecksumMismatch, "sha256 mismatch for etcdctl"},
		{"another version than the request's", "3.7.3", good, ErrBadBundle, `its manifest is for etcd "3.6.16", the request for 3.7.3`},
		{"an invalid version", "../../x", good, ErrBadBundle, "invalid etcd version"},
		{"no manifest first", testVersion, makeBundle(t, bundleEntry{Name: "etcd", From: bin("etcd")}, same),
			ErrBadBundle, `the first entry is "etcd", want the manifest bundle.json`},
		{"empty", testVersion, nil, ErrBadBundle, "read its manifest"},
		{"not a tar stream", testVersion, []byte(strings.Repeat("x", 2048)), ErrBadBundle, "read its manifest"},
		{"unknown manifest field", testVersion, makeBundle(t, bundleEntry{Name: BundleManifestName, Data: []byte(`{"version":"3.6.16","files":{"etcd":"` + sums["etcd"] + `"},"extra":1}`)}),
			ErrBadBundle, `unknown field "extra"`},
		{"a manifest without etcd", testVersion, makeBundle(t, with(func(m *BundleManifest) { delete(m.Files, "etcd") })), ErrBadBundle, "lists no etcd"},
		{"a manifest naming a path", testVersion, makeBundle(t, with(func(m *BundleManifest) { m.Files["../../bin/sh"] = zero })),
			ErrBadBundle, `lists "../../bin/sh", which is not one of etcd, etcdctl, etcdutl`},
		{"a bad sum", testVersion, makeBundle(t, with(func(m *BundleManifest) { m.Files["etcdctl"] = "abc" })), ErrBadBundle, `invalid sha256 "abc"`},
		{"an entry the manifest does not list", testVersion,
			makeBundle(t, same, bundleEntry{Name: "etcd", From: bin("etcd")}, bundleEntry{Name: "../etcd-v3.7.3/etcd", Data: []byte("x")}),
			ErrBadBundle, `entry "../etcd-v3.7.3/etcd" is not a file its manifest lists (etcd, etcdctl, etcdutl)`},
		{"a file sent twice", testVersion,
			makeBundle(t, same, bundleEntry{Name: "etcd", From: bin("etcd")}, bundleEntry{Name: "etcd", From: bin("etcd")}),
			ErrBadBundle, "etcd is sent twice"},
		{"a symlink", testVersion, makeBundle(t, same, bundleEntry{Name: "etcd", Type: tar.TypeSymlink}), ErrBadBundle, "etcd is not a regular file"},
		{"a file missing", testVersion,
			makeBundle(t, same, bundleEntry{Name: "etcd", From: bin("etcd")}, bundleEntry{Name: "etcdctl", From: bin("etcdctl")}),
			ErrBadBundle, "the bundle ends without etcdutl, which its manifest lists"},
		{"cut short", testVersion, good[:len(good)/2], ErrBadBundle, "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, fresh := range []bool{true, false} {
				dst := Open(t.TempDir())
				if !fresh {
					// A store that already holds another version.
					if _, err := dst.Import(ctx, cache, ImportOptions{Version: testVersion}); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(filepath.Join(dst.Dir, "etcd-v"+testVersion), filepath.Join(dst.Dir, "etcd-v3.5.35")); err != nil {
						t.Fatal(err)
					}
				}
				before := snapshot(t, dst.Dir)
				b, installed, err := dst.Receive(ctx, tt.version, bytes.NewReader(tt.bundle))
				if err == nil {
					t.Fatalf("Receive = %+v, %v; want a refusal", b, installed)
				}
				if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Receive: %v; want %q wrapping %v", err, tt.want, tt.is)
				}
				assertSnapshot(t, dst.Dir, before)
			}
		})
	}
}

// TestReceiveOverStoredCopy: a different etcd under the version is
// refused (as an import without force), and so is the same etcd whose
// stored copy no longer verifies; neither changes the store.
func TestReceiveOverStoredCopy(t *testing.T) {
	ctx := context.Background()
	cache := etcdCache(t, testVersion)
	_, bundle := sentStore(t)

	t.Run("different etcd", func(t *testing.T) {
		dst := Open(t.TempDir())
		changed := copyBinaries(t, cache, "v"+testVersion, "etcd", "etcdctl")
		appendByte(t, filepath.Join(changed, "etcd"))
		if _, err := dst.Import(ctx, changed, ImportOptions{}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, dst.Dir)
		_, _, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle))
		if !errors.Is(err, ErrDifferentBinary) || !strings.Contains(err.Error(), sha256File(t, filepath.Join(changed, "etcd"))) {
			t.Fatalf("Receive over a different etcd: %v", err)
		}
		assertSnapshot(t, dst.Dir, before)
	})
	t.Run("damaged copy of the same etcd", func(t *testing.T) {
		dst := Open(t.TempDir())
		if _, _, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle)); err != nil {
			t.Fatal(err)
		}
		appendByte(t, filepath.Join(dst.Dir, "etcd-v"+testVersion, "etcdutl"))
		before := snapshot(t, dst.Dir)
		_, _, err := dst.Receive(ctx, testVersion, bytes.NewReader(bundle))
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "etcdutl: sha256 is") {
			t.Fatalf("Receive over a damaged copy: %v", err)
		}
		assertSnapshot(t, dst.Dir, before)
	})
}

// TestSums: the manifest's sums of a stored version; a missing one, or
// the embedded version without a stored copy, is ErrNotFound.
func TestSums(t *testing.T) {
	s := Open(t.TempDir())
	for _, v := range []string{"3.7.3", EmbeddedVersion()} {
		if _, err := s.Sums(v); !errors.Is(err, ErrNotFound) {
			t.Errorf("Sums(%s) of an empty store: %v", v, err)
		}
	}
	if _, err := s.WriteBundle(io.Discard, "3.7.3"); err == nil {
		t.Error("WriteBundle of a missing version succeeded")
	}
}
