// Package ociimage builds container images from files on this machine,
// without a registry, a daemon or a Dockerfile, and writes each as an image
// tarball a container runtime imports (`ctr -n k8s.io images import FILE`,
// `docker load`, `podman load`).
//
// An image is one layer holding the files of its Spec (and the directories
// above them) over an empty base, and a configuration with the entrypoint.
//
// Invariant: the same Spec and the same source bytes give the same image
// digest, on any machine and at any time, so that a rebuild of unchanged
// inputs is the same image to the runtime. What varies on a real build is
// pinned here: every tar entry has uid and gid 0, no owner names and the
// modification time of the Unix epoch; entries are sorted by path; the
// layer is compressed by this package (klauspost/compress gzip at its best
// speed, one stream, no name or time in its header) rather than by
// go-containerregistry on the fly, and its digests are computed while it
// is written; the configuration's and the history's `created` is the epoch; the
// platform is linux and the architecture this program was built for. The
// tarball itself is go-containerregistry's, whose entries carry no times, so
// the file's bytes are reproducible too.
//
// The tarball is the docker-archive format (tarball.Write: manifest.json
// naming the image's tag in RepoTags, the config and the layer blobs), not
// an OCI layout tar: containerd 1.6's `ctr images import` names an image of
// a docker archive after its RepoTags by itself, where an OCI layout would
// need the io.containerd.image.name annotation or --base-name, and the
// format is the one verified against containerd 1.6 on these machines
// (docs/kubernetes-local.md). containerd converts the archive's manifest
// when it imports it, so the digest it lists may differ from Result.Digest;
// the configuration digest (Result.ID, the image ID crictl and the kubelet
// show) is kept as it is.
package ociimage

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// DefaultPath is the PATH of an image's environment unless its Spec sets
// one.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// epoch is every time recorded in an image.
var epoch = time.Unix(0, 0).UTC()

// File is one entry of an image.
type File struct {
	// Path is where it is in the image, absolute and clean
	// ("/usr/local/bin/kube-apiserver").
	Path string
	// Mode is its permission bits (0755, 0644; setuid, setgid and sticky
	// kept), and fs.ModeDir for a directory.
	Mode fs.FileMode
	// Source is the file on this machine whose content it gets; empty for
	// a directory.
	Source string
}

// Spec is what an image is made of.
type Spec struct {
	// Name is the image's repository ("registry.k8s.io/kube-apiserver")
	// and Tag its tag ("v1.36.3").
	Name, Tag string
	// Files are the image's files and directories; the directories above
	// each are added with mode 0755 unless listed.
	Files []File
	// Entrypoint and Cmd are the configuration's; Env defaults to
	// DefaultPath.
	Entrypoint, Cmd, Env []string
}

// Ref is the image's reference, Name:Tag.
func (s Spec) Ref() string { return s.Name + ":" + s.Tag }

// Result is a written image.
type Result struct {
	// Digest is the image manifest's digest ("sha256:..."), ID the
	// configuration's (the image ID runtimes show), Size the tarball's
	// size in bytes.
	Digest, ID string
	Size       int64
}

// entry is one tar entry of the layer.
type entry struct {
	name   string // tar name: no leading slash, directories end in one
	mode   fs.FileMode
	source string
}

// entries checks the files of a spec and returns the layer's entries,
// sorted, with the directories above each file.
func entries(files []File) ([]entry, error) {
	if len(files) == 0 {
		return nil, errors.New("an image needs at least one file")
	}
	byPath := map[string]entry{}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image path %q is not an absolute, clean path of a file or directory below /", f.Path)
		}
		if _, dup := byPath[f.Path]; dup {
			return nil, fmt.Errorf("image path %s is listed twice", f.Path)
		}
		switch {
		case f.Mode.IsDir():
			if f.Source != "" {
				return nil, fmt.Errorf("image path %s is a directory but has a source file %s", f.Path, f.Source)
			}
		case f.Mode.Type() != 0:
			return nil, fmt.Errorf("image path %s: only regular files and directories are supported, not mode %v", f.Path, f.Mode)
		case f.Source == "":
			return nil, fmt.Errorf("image path %s has no source file", f.Path)
		}
		byPath[f.Path] = entry{mode: f.Mode, source: f.Source}
	}
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if parent, ok := byPath[d]; ok {
				if !parent.mode.IsDir() {
					return nil, fmt.Errorf("image path %s is listed as a file and is the directory of %s", d, p)
				}
				continue
			}
			byPath[d] = entry{mode: fs.ModeDir | 0o755}
		}
	}
	out := make([]entry, 0, len(byPath))
	for p, e := range byPath {
		e.name = strings.TrimPrefix(p, "/")
		if e.mode.IsDir() {
			e.name += "/"
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// tarMode is the tar header mode of a file mode: permission bits and the
// setuid, setgid and sticky bits.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// writeLayer writes the gzip-compressed layer tar of the entries to w and
// returns the SHA-256 of the compressed bytes (the layer's digest) and of
// the tar (its diff ID), computed on the way: one pass over the sources.
func writeLayer(ctx context.Context, w io.Writer, es []entry) (digest, diffID v1.Hash, err error) {
	compressed, uncompressed := sha256.New(), sha256.New()
	zw, err := gzip.NewWriterLevel(io.MultiWriter(w, compressed), gzip.BestSpeed)
	if err != nil {
		return v1.Hash{}, v1.Hash{}, err
	}
	tw := tar.NewWriter(io.MultiWriter(zw, uncompressed))
	for _, e := range es {
		if err := ctx.Err(); err != nil {
			return v1.Hash{}, v1.Hash{}, err
		}
		h := &tar.Header{Name: e.name, Mode: tarMode(e.mode), ModTime: epoch, Format: tar.FormatPAX}
		if e.mode.IsDir() {
			h.Typeflag = tar.TypeDir
			if err := tw.WriteHeader(h); err != nil {
				return v1.Hash{}, v1.Hash{}, err
			}
			continue
		}
		if err := copyFile(ctx, tw, h, e.source); err != nil {
			return v1.Hash{}, v1.Hash{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, v1.Hash{}, err
	}
	if err := zw.Close(); err != nil {
		return v1.Hash{}, v1.Hash{}, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(compressed.Sum(nil))},
		v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(uncompressed.Sum(nil))}, nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// layer is a compressed layer in a file whose digest and diff ID are
// known (partial.CompressedToLayer makes it a v1.Layer without reading
// the file again to compute them).
type layer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func (l *layer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *layer) Size() (int64, error)                { return l.size, nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }
func (l *layer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func copyFile(ctx context.Context, tw *tar.Writer, h *tar.Header, source string) error {
	f, err := os.Open(source)
	if err != nil {
		return fmt.Errorf("source of image file /%s: %w", h.Name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("source of image file /%s: %s is not a regular file", h.Name, source)
	}
	h.Typeflag = tar.TypeReg
	h.Size = st.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if n, err := io.Copy(tw, ctxReader{ctx, f}); err != nil {
		return fmt.Errorf("source of image file /%s: %w", h.Name, err)
	} else if n != st.Size() {
		return fmt.Errorf("source of image file /%s: %s changed while it was read", h.Name, source)
	}
	return nil
}

// format names how this package lays out an image; it changes whenever
// the same inputs would give another image, so that Inputs changes too.
const format = "steward-ociimage/1"

// Inputs is a digest of everything the image of spec is made of: the
// spec and the content of every source file (not their times or modes on
// this machine). Equal Inputs give equal images, so a builder may skip an
// image whose Inputs it has built before (internal/kubeimages does).
func Inputs(ctx context.Context, spec Spec) (string, error) {
	es, err := entries(spec.Files)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q %q %q %q %q %q\n", format, spec.Name, spec.Tag, spec.Entrypoint, spec.Cmd, spec.Env, runtime.GOARCH)
	for _, e := range es {
		fmt.Fprintf(h, "%q %o\n", e.name, tarMode(e.mode))
		if e.mode.IsDir() {
			continue
		}
		f, err := os.Open(e.source)
		if err != nil {
			return "", fmt.Errorf("source of image file /%s: %w", e.name, err)
		}
		n, err := io.Copy(h, ctxReader{ctx, f})
		_ = f.Close()
		if err != nil {
			return "", fmt.Errorf("source of image file /%s: %w", e.name, err)
		}
		fmt.Fprintf(h, "\n%d\n", n)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Write builds the image of spec and writes its tarball at out (mode
// 0644), replacing a previous one only once the new one is complete. The
// compressed layer is staged next to out and removed afterwards.
func Write(ctx context.Context, spec Spec, out string) (Result, error) {
	ref, err := name.NewTag(spec.Ref(), name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("image reference %q: %w", spec.Ref(), err)
	}
	es, err := entries(spec.Files)
	if err != nil {
		return Result{}, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	layerFile, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".layer-*")
	if err != nil {
		return Result{}, err
	}
	defer func() {
		_ = layerFile.Close()
		_ = os.Remove(layerFile.Name())
	}()
	digest, diffID, err := writeLayer(ctx, layerFile, es)
	if err != nil {
		return Result{}, fmt.Errorf("image %s: layer: %w", spec.Ref(), err)
	}
	st, err := layerFile.Stat()
	if err != nil {
		return Result{}, err
	}
	if err := layerFile.Close(); err != nil {
		return Result{}, err
	}
	img, err := image(spec, &layer{path: layerFile.Name(), digest: digest, diffID: diffID, size: st.Size()}, len(es))
	if err != nil {
		return Result{}, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	manifest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	id, err := img.ConfigName()
	if err != nil {
		return Result{}, err
	}
	// Staged at out.new and renamed over out: a reader sees the old
	// tarball or the new one, and a failure leaves the old one.
	staged := out + ".new"
	if err := os.Remove(staged); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, err
	}
	if err := atomicfile.Create(staged, 0o644, func(f *os.File) error {
		return tarball.Write(ref, img, f)
	}); err != nil {
		return Result{}, fmt.Errorf("image %s: %w", spec.Ref(), err)
	}
	if err := os.Rename(staged, out); err != nil {
		return Result{}, err
	}
	if err := atomicfile.SyncDir(filepath.Dir(out)); err != nil {
		return Result{}, err
	}
	st, err = os.Stat(out)
	if err != nil {
		return Result{}, err
	}
	return Result{Digest: manifest.String(), ID: id.String(), Size: st.Size()}, nil
}

// image is the image of spec over one compressed layer.
func image(spec Spec, cl *layer, n int) (v1.Image, error) {
	layer, err := partial.CompressedToLayer(cl)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: fmt.Sprintf("steward ociimage: %d entries", n)},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	env := spec.Env
	if len(env) == 0 {
		env = []string{DefaultPath}
	}
	cf.Config = v1.Config{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, Env: env}
	return mutate.ConfigFile(img, cf)
}
