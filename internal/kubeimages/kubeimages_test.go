package kubeimages

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var goodIndex = `{"images": [
  {"name": "registry.k8s.io/pause", "tag": "3.10.2", "digest": "sha256:` + strings.Repeat("a", 64) + `",
   "id": "sha256:` + strings.Repeat("b", 64) + `", "file": "pause-3.10.2.tar", "size": 1500000,
   "inputs": "sha256:` + strings.Repeat("c", 64) + `"}
]}`

func TestParseIndex(t *testing.T) {
	ix, err := ParseIndex([]byte(goodIndex))
	if err != nil {
		t.Fatal(err)
	}
	if i, ok := ix.Find("registry.k8s.io/pause:3.10.2"); !ok || i.File != "pause-3.10.2.tar" {
		t.Errorf("Find: %+v %v", i, ok)
	}
	if _, ok := ix.Find("registry.k8s.io/pause:3.10.1"); ok {
		t.Error("found a tag that is not there")
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"file": "pause-3.10.2.tar"`, `"file": "../pause.tar"`, "is not a file name in the images directory"},
		{`"file": "pause-3.10.2.tar"`, `"file": "/tmp/pause.tar"`, "is not a file name"},
		{`"file": "pause-3.10.2.tar"`, `"file": "sub/pause.tar"`, "is not a file name"},
		{`"digest": "sha256:`, `"digest": "md5:`, "must be sha256"},
		{`"tag": "3.10.2"`, `"tag": ""`, "bad tag"},
		{`"name": "registry.k8s.io/pause"`, `"name": "Registry"`, "bad name"},
		{`"size": 1500000`, `"size": -1`, "negative size"},
		{`"size": 1500000`, `"size": 1, "extra": 1`, "unknown field"},
		{`]}`, `]} {}`, "data after the index"},
	} {
		in := strings.Replace(goodIndex, tc.from, tc.to, 1)
		if _, err := ParseIndex([]byte(in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.to, err, tc.want)
		}
	}
	var ix2 Index
	_ = json.Unmarshal([]byte(goodIndex), &ix2)
	ix2.Images = append(ix2.Images, ix2.Images[0])
	b, _ := json.Marshal(ix2)
	if _, err := ParseIndex(b); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("duplicate: %v", err)
	}
}

// TestBuildRefusals: bad input is refused before anything is built or
// written, naming the input at fault.
func TestBuildRefusals(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "kube")
	store := filepath.Join(dir, "store")
	out := filepath.Join(dir, "images")
	bin := KubeBin(cache, "v1.36.3")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeKube(t, cache, "v1.36.3", "v1.14.2", "3.10.2")
	opts := func(versions ...string) Options {
		return Options{KubeVersions: versions, KubeCache: cache, CoreDNSCache: filepath.Join(dir, "coredns"), Store: store, Out: out, Source: dir}
	}
	for _, tc := range []struct {
		opts Options
		want string
		is   error
	}{
		{opts(), "no Kubernetes version", nil},
		{opts("1.36.3"), `"1.36.3" is not v1.MINOR.PATCH`, nil},
		{opts("v1.36.3", "v1.35.4"), "Kubernetes v1.35.4 has no kube-apiserver in " + KubeBin(cache, "v1.35.4"), ErrNoBinaries},
		{opts("v1.36.3"), "no etcd version in the binary store " + store, ErrNoStore},
	} {
		_, err := Build(t.Context(), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%v: error %v, want %q (%v)", tc.opts.KubeVersions, err, tc.want, tc.is)
		}
	}
	// The store filled, the CoreDNS kubeadm names is missing.
	fakeStore(t, store, "2026-11-27T18:33:04Z", "/src/.cache/etcd/v3.6.16")
	_, err := Build(t.Context(), opts("v1.36.3"))
	if want := "Kubernetes v1.36.3's kubeadm names CoreDNS v1.14.2, and " + CoreDNSBin(filepath.Join(dir, "coredns"), "v1.14.2") + " is not there"; err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrNoCoreDNS) {
		t.Errorf("CoreDNS not built: error %v, want %q (ErrNoCoreDNS)", err, want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the images directory was created: %v", err)
	}
}

// fakeKube puts a version's binaries into cache: files for the components,
// and a kubeadm whose `config images list` names the CoreDNS and pause
// tags given.
func fakeKube(t *testing.T, cache, version, coredns, pause string) {
	t.Helper()
	bin := KubeBin(cache, version)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range Components {
		if err := os.WriteFile(filepath.Join(bin, c), []byte(c+" "+version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	list := "#!/bin/sh\n[ \"$5\" = " + version + " ] || exit 1\ncat <<EOF\n"
	for _, c := range Components {
		list += "registry.k8s.io/" + c + ":" + version + "\n"
	}
	list += CoreDNSImage + ":" + coredns + "\nregistry.k8s.io/pause:" + pause + "\nregistry.k8s.io/etcd:3.6.8-0\nEOF\n"
	if err := os.WriteFile(filepath.Join(bin, "kubeadm"), []byte(list), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeStore puts one etcd version into a binary store, its manifest
// recording the time and source of the import given.
func fakeStore(t *testing.T, store, importedAt, source string) {
	t.Helper()
	d := filepath.Join(store, "etcd-v3.6.16")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"etcd", "etcdctl", "etcdutl"} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(f+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	manifest := `{"version": "3.6.16", "importedAt": "` + importedAt + `", "source": "` + source + `", "files": {"etcd": "ab"}}`
	if err := os.WriteFile(filepath.Join(d, "manifest.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBuildReproducible: two builds of every image from the same inputs
// into two directories give the same index (digests, IDs, sizes, inputs),
// and the index has each version's CoreDNS (the one its kubeadm names,
// once per distinct version) besides pause, the components and Steward's.
// The two builds' binary stores are two machines': the same binaries,
// imported at another time from another directory (their manifests'
// importedAt and source), which Steward's image does not depend on. It
// builds steward and pause from this source tree.
func TestBuildReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds steward twice")
	}
	dir := t.TempDir()
	cache, coredns, store := filepath.Join(dir, "kube"), filepath.Join(dir, "coredns"), filepath.Join(dir, "store")
	fakeKube(t, cache, "v1.35.4", "v1.13.1", "3.10.1")
	fakeKube(t, cache, "v1.36.3", "v1.14.2", "3.10.2")
	fakeKube(t, cache, "v1.36.2", "v1.14.2", "3.10.2")
	for _, v := range []string{"v1.13.1", "v1.14.2"} {
		if err := os.MkdirAll(filepath.Dir(CoreDNSBin(coredns, v)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(CoreDNSBin(coredns, v), []byte("coredns "+v+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeStore(t, store+"-a", "2026-11-27T18:33:04Z", "/work/main/.cache/etcd/v3.6.16")
	fakeStore(t, store+"-b", "2026-11-28T03:00:00Z", "/src/steward/.cache/etcd/v3.6.16")
	source, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	build := func(out string) Index {
		t.Helper()
		ix, err := Build(t.Context(), Options{KubeVersions: []string{"v1.35.4", "v1.36.3", "v1.36.2"}, KubeCache: cache,
			CoreDNSCache: coredns, Store: store + "-" + out, Source: source, Out: filepath.Join(dir, out)})
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	first, second := build("a"), build("b")
	if !slices.Equal(first.Images, second.Images) {
		t.Errorf("two builds differ:\n%+v\n%+v", first.Images, second.Images)
	}
	var corednsRefs []string
	for _, i := range first.Images {
		if i.Name == CoreDNSImage {
			corednsRefs = append(corednsRefs, i.Ref())
			if want := "coredns-" + i.Tag + ".tar"; i.File != want {
				t.Errorf("%s in %s, want %s", i.Ref(), i.File, want)
			}
		}
	}
	if want := []string{CoreDNSImage + ":v1.13.1", CoreDNSImage + ":v1.14.2"}; !slices.Equal(corednsRefs, want) {
		t.Errorf("CoreDNS images %v, want %v", corednsRefs, want)
	}
	// A rebuild into a directory with tarballs the new index does not name
	// (a version no longer built, Steward's of an older commit) removes
	// them, and leaves other files and every named tarball.
	a := filepath.Join(dir, "a")
	for _, f := range []string{"kube-apiserver-v1.34.0.tar", "steward-0123abc.tar", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(a, f), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if again := build("a"); !slices.Equal(again.Images, first.Images) {
		t.Errorf("a rebuild differs:\n%+v\n%+v", again.Images, first.Images)
	}
	for f, want := range map[string]bool{"kube-apiserver-v1.34.0.tar": false, "steward-0123abc.tar": false, "notes.txt": true, IndexFile: true} {
		if _, err := os.Stat(filepath.Join(a, f)); (err == nil) != want {
			t.Errorf("%s: there %v, want %v", f, err == nil, want)
		}
	}
	for _, i := range first.Images {
		if _, err := os.Stat(filepath.Join(a, i.File)); err != nil {
			t.Errorf("named tarball: %v", err)
		}
	}
	// The manifest in the image: the epoch and no machine's path.
	if b, _ := os.ReadFile(filepath.Join(store+"-b", "etcd-v3.6.16", "manifest.json")); !strings.Contains(string(b), "2026-11-28T03:00:00Z") {
		t.Errorf("the store's own manifest was changed: %s", b)
	}
	if len(first.Images) != 2+3*len(Components)+2+1 {
		t.Errorf("%d images, want 2 pause, %d components, 2 CoreDNS, Steward's: %+v", len(first.Images), 3*len(Components), first.Images)
	}
}

// TestPrepareOut: a directory Build did not create keeps its mode (--out
// /tmp keeps its sticky bit); one that is not an images directory is
// refused, unchanged; a new one is made 0700.
func TestPrepareOut(t *testing.T) {
	root := t.TempDir()
	sticky := filepath.Join(root, "tmp")
	if err := os.Mkdir(sticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sticky, "x.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := prepareOut(sticky)
	if err == nil || !strings.Contains(err.Error(), "is not an images directory") {
		t.Errorf("a directory of other files: %v", err)
	}
	if fi, _ := os.Stat(sticky); fi.Mode()&(os.ModeSticky|os.ModePerm) != os.ModeSticky|0o777 {
		t.Errorf("refused, yet its mode is now %v", fi.Mode())
	}
	ours := filepath.Join(root, "images")
	if err := prepareOut(ours); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(ours); fi.Mode().Perm() != 0o700 {
		t.Errorf("a new images directory is %v", fi.Mode())
	}
	if err := os.WriteFile(filepath.Join(ours, IndexFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareOut(ours); err != nil {
		t.Errorf("an images directory: %v", err)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := prepareOut(empty); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
	if fi, _ := os.Stat(empty); fi.Mode().Perm() != 0o750 {
		t.Errorf("an existing directory's mode changed to %v", fi.Mode())
	}
}

// TestNormalizeManifest: importedAt and source replaced, the rest kept;
// not an object refused.
func TestNormalizeManifest(t *testing.T) {
	in := `{"version": "3.6.16", "importedAt": "2026-11-27T18:33:04Z", "source": "/x", "files": {"etcd": "ab"}, "future": 1}`
	out, err := NormalizeManifest([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m["importedAt"] != "1970-01-01T00:00:00Z" || m["source"] != ImageManifestSource || m["version"] != "3.6.16" || m["future"] != 1.0 || m["files"].(map[string]any)["etcd"] != "ab" {
		t.Errorf("normalized: %s", out)
	}
	for _, bad := range []string{"null", "[]", "{", ""} {
		if _, err := NormalizeManifest([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParseIndex: images.json is read from disk; whatever it holds,
// ParseIndex returns an error or an index whose every entry names a
// tarball inside the directory.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(goodIndex))
	f.Add([]byte(`{"images": []}`))
	f.Add([]byte(`{"images": [{"file": "../x"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := ParseIndex(data)
		if err != nil {
			return
		}
		for _, i := range ix.Images {
			if i.File == "" || i.File == "." || strings.Contains(i.File, "/") || strings.HasPrefix(i.File, "..") || filepath.Base(i.File) != i.File {
				t.Fatalf("accepted file %q", i.File)
			}
		}
	})
}
