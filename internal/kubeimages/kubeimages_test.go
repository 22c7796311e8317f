package kubeimages

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
	for _, c := range append(Components, "kubeadm") {
		if err := os.WriteFile(filepath.Join(bin, c), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := func(versions ...string) Options {
		return Options{KubeVersions: versions, KubeCache: cache, Store: store, Out: out, Source: dir}
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
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the images directory was created: %v", err)
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
