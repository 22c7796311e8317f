package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func writeSource(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func spec(bin, conf string) Spec {
	return Spec{
		Name: "example.test/tool", Tag: "v1",
		Files: []File{
			{Path: "/usr/local/bin/tool", Mode: 0o755, Source: bin},
			{Path: "/etc/tool/tool.conf", Mode: 0o644, Source: conf},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Entrypoint: []string{"/usr/local/bin/tool"},
	}
}

// TestReproducible: the same inputs give the same digest and the same
// tarball bytes, even when the sources' times, modes and the order of the
// files differ; a change of content, mode, path or entrypoint changes it.
func TestReproducible(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	bin := writeSource(t, src, "bin", "#!/bin/true\n")
	conf := writeSource(t, src, "conf", "a=1\n")
	write := func(name string, s Spec) (Result, []byte) {
		t.Helper()
		p := filepath.Join(out, name)
		r, err := Write(t.Context(), s, p)
		if err != nil {
			t.Fatalf("Write %s: %v", name, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 || st.Size() != r.Size {
			t.Errorf("%s: mode %v size %d, want 0644 and %d", name, st.Mode().Perm(), st.Size(), r.Size)
		}
		return r, b
	}
	inputs := func(s Spec) string {
		t.Helper()
		in, err := Inputs(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	firstInputs := inputs(spec(bin, conf))
	first, firstBytes := write("a.tar", spec(bin, conf))
	if !strings.HasPrefix(first.Digest, "sha256:") || !strings.HasPrefix(first.ID, "sha256:") {
		t.Fatalf("result %+v", first)
	}

	// Same content, other times and modes on the host, files listed in
	// another order: the same image.
	later := time.Now().Add(time.Hour)
	for _, p := range []string{bin, conf} {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	s := spec(bin, conf)
	s.Files[0], s.Files[2] = s.Files[2], s.Files[0]
	if in := inputs(s); in != firstInputs {
		t.Errorf("inputs %s, first %s", in, firstInputs)
	}
	again, againBytes := write("b.tar", s)
	if again != first {
		t.Errorf("second build %+v, first %+v", again, first)
	}
	if !bytes.Equal(againBytes, firstBytes) {
		t.Error("the two tarballs differ")
	}
	// Rewriting over an existing tarball replaces it.
	if over, _ := write("a.tar", spec(bin, conf)); over != first {
		t.Errorf("rewrite %+v, first %+v", over, first)
	}

	changed := map[string]Spec{}
	s = spec(bin, writeSource(t, src, "conf2", "a=2\n"))
	changed["content"] = s
	s = spec(bin, conf)
	s.Files[1].Mode = 0o600
	changed["mode"] = s
	s = spec(bin, conf)
	s.Files[1].Path = "/etc/tool/other.conf"
	changed["path"] = s
	s = spec(bin, conf)
	s.Entrypoint = []string{"/usr/local/bin/tool", "--flag"}
	changed["entrypoint"] = s
	s = spec(bin, conf)
	s.Tag = "v2"
	for what, s := range changed {
		r, _ := write(what+".tar", s)
		if r.Digest == first.Digest || r.ID == first.ID {
			t.Errorf("a change of %s kept the digest %s", what, r.Digest)
		}
		if inputs(s) == firstInputs {
			t.Errorf("a change of %s kept the inputs", what)
		}
	}
	// The tag names the image, not its content.
	if r, _ := write("tag.tar", s); r.Digest != first.Digest {
		t.Errorf("another tag changed the digest: %s, %s", r.Digest, first.Digest)
	}
}

// TestLayer: the layer holds the files with their modes, the directories
// above them, uid and gid 0 and the epoch as time, sorted; the tarball
// names the image's tag and its config the entrypoint.
func TestLayer(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	s := spec(writeSource(t, src, "bin", "binary"), writeSource(t, src, "conf", "conf"))
	p := filepath.Join(out, "img.tar")
	if _, err := Write(t.Context(), s, p); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/tool" || cf.OS != "linux" || !cf.Created.Time.Equal(epoch) {
		t.Errorf("config: entrypoint %q os %q created %v", got, cf.OS, cf.Created)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d: %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d gid %d uname %q time %v", h.Name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %o %s", h.Name, h.Mode, body))
	}
	want := []string{
		"etc/ 755 ", "etc/tool/ 755 ", "etc/tool/tool.conf 644 conf",
		"tmp/ 1777 ", "usr/ 755 ", "usr/local/ 755 ", "usr/local/bin/ 755 ",
		"usr/local/bin/tool 755 binary",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m, _ := tarballManifestTags(t, p)
	if m != "example.test/tool:v1" {
		t.Errorf("RepoTags %q", m)
	}
}

func tarballManifestTags(t *testing.T, p string) (string, error) {
	t.Helper()
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Fatalf("manifest %+v", m)
	}
	return strings.Join(m[0].RepoTags, ","), nil
}

// TestBadSpec: a spec that cannot be an image is refused with the path at
// fault, and nothing is written.
func TestBadSpec(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	bin := writeSource(t, src, "bin", "x")
	for _, tc := range []struct {
		files []File
		want  string
	}{
		{nil, "at least one file"},
		{[]File{{Path: "usr/bin/x", Mode: 0o755, Source: bin}}, `"usr/bin/x" is not an absolute`},
		{[]File{{Path: "/usr/../bin/x", Mode: 0o755, Source: bin}}, "is not an absolute, clean"},
		{[]File{{Path: "/x", Mode: 0o755, Source: bin}, {Path: "/x", Mode: 0o755, Source: bin}}, "/x is listed twice"},
		{[]File{{Path: "/x", Mode: 0o755}}, "/x has no source file"},
		{[]File{{Path: "/x", Mode: 0o755, Source: bin}, {Path: "/x/y", Mode: 0o755, Source: bin}}, "/x is listed as a file and is the directory of /x/y"},
		{[]File{{Path: "/x", Mode: 0o755, Source: filepath.Join(src, "missing")}}, "source of image file /x"},
		{[]File{{Path: "/x", Mode: 0o755, Source: src}}, "is not a regular file"},
	} {
		_, err := Write(t.Context(), Spec{Name: "example.test/x", Tag: "v1", Files: tc.files}, filepath.Join(out, "x.tar"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one saying %q", tc.files, err, tc.want)
		}
	}
	if _, err := Write(t.Context(), Spec{Name: "Bad Name", Tag: "v1", Files: []File{{Path: "/x", Mode: 0o755, Source: bin}}}, filepath.Join(out, "x.tar")); err == nil || !strings.Contains(err.Error(), `"Bad Name:v1"`) {
		t.Errorf("bad reference: %v", err)
	}
	// A cancelled build stops and leaves nothing either.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Write(ctx, Spec{Name: "example.test/x", Tag: "v1", Files: []File{{Path: "/x", Mode: 0o755, Source: bin}}}, filepath.Join(out, "x.tar")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if left, _ := os.ReadDir(out); len(left) != 0 {
		t.Errorf("left in the output directory: %v", left)
	}
}
