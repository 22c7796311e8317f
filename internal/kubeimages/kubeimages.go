// Package kubeimages builds the container images a local Kubernetes runs
// (cmd/localkube, docs/kubernetes-local.md), with internal/ociimage, into
// one directory of image tarballs and its index, images.json:
//
//   - the pause image, registry.k8s.io/pause:<tag kubeadm of each version
//     expects> (cmd/localkube/pause, built static);
//   - per Kubernetes version, kube-apiserver, kube-controller-manager,
//     kube-scheduler and kube-proxy under kubeadm's names and tags
//     (registry.k8s.io/<name>:<version>), each its binary at
//     /usr/local/bin/<name> (on PATH: kubeadm's static pods name the command
//     alone) and as entrypoint, from the per-version binaries hack/build-kube.sh
//     builds (<KubeCache>/<version>/bin);
//   - per Kubernetes version, the CoreDNS kubeadm of that version names
//     (`kubeadm config images list`), registry.k8s.io/coredns/coredns:<its
//     version>, from the binary hack/build-coredns.sh builds
//     (<CoreDNSCache>/<version>/bin/coredns): /coredns, the entrypoint, as
//     upstream's image has it; one image per distinct version;
//   - Steward's own, steward.etcd.io/steward:<git describe --tags --always
//     --dirty of the source, "dev" outside a Git checkout>: the steward
//     binary built static at /usr/local/bin/steward (the entrypoint) and
//     every etcd version of the binary store at /opt/steward/binaries,
//     laid out as the store is (etcd-v<version>/{etcd,etcdctl,etcdutl,
//     manifest.json}); /opt, not /var/lib/steward/binaries (the agent's
//     default), because a pod mounts its data volume on /var/lib/steward:
//     pass --binary-store /opt/steward/binaries.
//
// Invariants: the directory is 0700 when Build creates it (an existing
// images directory keeps its mode, any other is refused) and the tarballs 0644; images.json is
// written atomically after every tarball it names is complete, and names
// each tarball by a path relative to the directory; a tarball (*.tar) it no
// longer names is removed, only after it is written.
package kubeimages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/ociimage"
)

// IndexFile is the index's name in the images directory.
const IndexFile = "images.json"

// StewardImage is the repository of Steward's image and StoreDir where its
// binary store is in it.
const (
	StewardImage = "steward.etcd.io/steward"
	StoreDir     = "/opt/steward/binaries"
)

// Components are the Kubernetes components that get an image, by
// kubeadm's names.
var Components = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

var (
	// ErrNoBinaries is wrapped when a Kubernetes version has no built
	// binaries.
	ErrNoBinaries = errors.New("Kubernetes binaries not built")
	// ErrNoStore is wrapped when the etcd binary store has no version.
	ErrNoStore = errors.New("etcd binary store empty")
	// ErrNoCoreDNS is wrapped when the CoreDNS a Kubernetes version's
	// kubeadm names is not built.
	ErrNoCoreDNS = errors.New("CoreDNS not built")
)

// Options say what to build, from where, to where.
type Options struct {
	// KubeVersions are the Kubernetes releases ("v1.36.3"); KubeCache
	// holds their binaries at <KubeCache>/<version>/bin.
	KubeVersions []string
	KubeCache    string
	// CoreDNSCache holds the CoreDNS binaries at
	// <CoreDNSCache>/<version>/bin/coredns.
	CoreDNSCache string
	// Store is the etcd binary store whose versions go into Steward's
	// image.
	Store string
	// Source is Steward's module directory, from which steward and pause
	// are built (go build, CGO_ENABLED=0).
	Source string
	// Out is the images directory.
	Out string
	// Log gets one line per image; nil discards them.
	Log io.Writer
}

// Image is one entry of the index.
type Image struct {
	// Name and Tag are the image's reference (Name:Tag).
	Name string `json:"name"`
	Tag  string `json:"tag"`
	// Digest is the image manifest's digest, ID its configuration's (the
	// image ID a runtime shows).
	Digest string `json:"digest"`
	ID     string `json:"id"`
	// File is the tarball, relative to the images directory; Size its
	// size in bytes.
	File string `json:"file"`
	Size int64  `json:"size"`
	// Inputs is ociimage.Inputs of the image: an image whose inputs are
	// those of the index's entry, and whose tarball is there with the
	// entry's size, is not built again.
	Inputs string `json:"inputs"`
}

// Ref is the image's reference, name:tag.
func (i Image) Ref() string { return i.Name + ":" + i.Tag }

// prepareOut makes the images directory out 0700 if it does not exist.
// An existing one is used as it is, if it is an images directory (it has
// images.json, or is empty but for a killed build's .build-*): its mode is
// not changed (--out /tmp would have lost its sticky bit), and any other
// directory is refused.
func prepareOut(out string) error {
	ents, err := os.ReadDir(out)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(out, 0o700); err != nil {
			return err
		}
		return os.Chmod(out, 0o700) // created here: 0700 whatever the umask
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(out, IndexFile)); err == nil {
		return nil
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".build-") {
			return fmt.Errorf("directory %s is not an images directory (no %s, and it holds %s): give a new or empty directory", out, IndexFile, e.Name())
		}
	}
	return nil
}

// Index is images.json.
type Index struct {
	Images []Image `json:"images"`
}

// Find returns the image of a reference (name:tag).
func (ix Index) Find(ref string) (Image, bool) {
	for _, i := range ix.Images {
		if i.Ref() == ref {
			return i, true
		}
	}
	return Image{}, false
}

var (
	kubeVersionRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)
	digestRE      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	refPartRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*$`)
	tagRE         = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// ParseIndex reads an images.json; it refuses one whose entries are not
// well formed (a tarball path leaving the directory, a digest that is not
// sha256, a reference listed twice).
func ParseIndex(data []byte) (Index, error) {
	var ix Index
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ix); err != nil {
		return Index{}, fmt.Errorf("image index: %w", err)
	}
	if dec.More() {
		return Index{}, errors.New("image index: data after the index")
	}
	seen := map[string]bool{}
	for n, i := range ix.Images {
		switch {
		case !refPartRE.MatchString(i.Name):
			return Index{}, fmt.Errorf("image index: entry %d: bad name %q", n, i.Name)
		case !tagRE.MatchString(i.Tag):
			return Index{}, fmt.Errorf("image index: %s: bad tag %q", i.Name, i.Tag)
		case !digestRE.MatchString(i.Digest) || !digestRE.MatchString(i.ID) || !digestRE.MatchString(i.Inputs):
			return Index{}, fmt.Errorf("image index: %s: digest %q, id %q and inputs %q must be sha256:<64 hex digits>", i.Ref(), i.Digest, i.ID, i.Inputs)
		case i.File == "" || i.File == "." || path.IsAbs(i.File) || path.Clean(i.File) != i.File || strings.HasPrefix(i.File, "..") || strings.Contains(i.File, "/"):
			return Index{}, fmt.Errorf("image index: %s: file %q is not a file name in the images directory", i.Ref(), i.File)
		case i.Size < 0:
			return Index{}, fmt.Errorf("image index: %s: negative size %d", i.Ref(), i.Size)
		case seen[i.Ref()]:
			return Index{}, fmt.Errorf("image index: %s is listed twice", i.Ref())
		}
		seen[i.Ref()] = true
	}
	return ix, nil
}

// ReadIndex reads the images.json of an images directory.
func ReadIndex(dir string) (Index, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return Index{}, err
	}
	ix, err := ParseIndex(b)
	if err != nil {
		return Index{}, fmt.Errorf("%s: %w", filepath.Join(dir, IndexFile), err)
	}
	return ix, nil
}

// KubeBin is where the binaries of a Kubernetes version are.
func KubeBin(cache, version string) string { return filepath.Join(cache, version, "bin") }

// CoreDNSBin is the CoreDNS binary of a CoreDNS version.
func CoreDNSBin(cache, version string) string {
	return filepath.Join(cache, version, "bin", "coredns")
}

// CoreDNSImage is the repository of CoreDNS's image, kubeadm's name.
const CoreDNSImage = "registry.k8s.io/coredns/coredns"

// Build builds every image of opts into opts.Out and writes the index. It
// checks every input before it builds anything, and refuses with the input
// at fault: a version that is not v1.MINOR.PATCH, one without binaries
// (ErrNoBinaries), an empty store (ErrNoStore).
func Build(ctx context.Context, opts Options) (Index, error) {
	logw := opts.Log
	if logw == nil {
		logw = io.Discard
	}
	if len(opts.KubeVersions) == 0 {
		return Index{}, errors.New("no Kubernetes version to build images of")
	}
	for _, v := range opts.KubeVersions {
		if !kubeVersionRE.MatchString(v) {
			return Index{}, fmt.Errorf("Kubernetes version %q is not v1.MINOR.PATCH (for example v1.36.3)", v)
		}
		for _, c := range append(slices.Clone(Components), "kubeadm") {
			if st, err := os.Stat(filepath.Join(KubeBin(opts.KubeCache, v), c)); err != nil || !st.Mode().IsRegular() {
				return Index{}, fmt.Errorf("Kubernetes %s has no %s in %s: %w", v, c, KubeBin(opts.KubeCache, v), ErrNoBinaries)
			}
		}
	}
	storeFiles, err := storeFiles(opts.Store)
	if err != nil {
		return Index{}, err
	}
	// The pause and CoreDNS versions kubeadm of each version names, asked
	// before anything is written.
	var pauseTags, corednsTags []string
	for _, v := range opts.KubeVersions {
		tags, err := KubeadmImages(ctx, filepath.Join(KubeBin(opts.KubeCache, v), "kubeadm"), v)
		if err != nil {
			return Index{}, err
		}
		if !slices.Contains(pauseTags, tags.Pause) {
			pauseTags = append(pauseTags, tags.Pause)
		}
		if !slices.Contains(corednsTags, tags.CoreDNS) {
			if st, err := os.Stat(CoreDNSBin(opts.CoreDNSCache, tags.CoreDNS)); err != nil || !st.Mode().IsRegular() {
				return Index{}, fmt.Errorf("Kubernetes %s's kubeadm names CoreDNS %s, and %s is not there: %w", v, tags.CoreDNS, CoreDNSBin(opts.CoreDNSCache, tags.CoreDNS), ErrNoCoreDNS)
			}
			corednsTags = append(corednsTags, tags.CoreDNS)
		}
	}
	if err := prepareOut(opts.Out); err != nil {
		return Index{}, err
	}

	build, err := os.MkdirTemp(opts.Out, ".build-")
	if err != nil {
		return Index{}, err
	}
	defer os.RemoveAll(build)
	steward := filepath.Join(build, "steward")
	pause := filepath.Join(build, "pause")
	if err := GoBuild(ctx, opts.Source, "./cmd/steward", steward); err != nil {
		return Index{}, err
	}
	if err := GoBuild(ctx, opts.Source, PausePackage, pause); err != nil {
		return Index{}, err
	}
	var specs []ociimage.Spec
	for _, tag := range pauseTags {
		specs = append(specs, PauseSpec(pause, tag))
	}
	for _, v := range opts.KubeVersions {
		for _, c := range Components {
			specs = append(specs, ComponentSpec(c, v, filepath.Join(KubeBin(opts.KubeCache, v), c)))
		}
	}
	for _, tag := range corednsTags {
		specs = append(specs, CoreDNSSpec(tag, CoreDNSBin(opts.CoreDNSCache, tag)))
	}
	if storeFiles, err = normalizeManifests(build, storeFiles); err != nil {
		return Index{}, err
	}
	stewardFiles := append([]ociimage.File{
		{Path: "/usr/local/bin/steward", Mode: 0o755, Source: steward},
		{Path: "/var/lib/steward", Mode: fs.ModeDir | 0o700},
		tmpDir,
	}, storeFiles...)
	specs = append(specs, ociimage.Spec{
		Name: StewardImage, Tag: stewardTag(ctx, opts.Source),
		Files: stewardFiles, Entrypoint: []string{"/usr/local/bin/steward"},
	})

	// The previous index, if any, says which images are already built;
	// an unreadable one means none is.
	prev, _ := ReadIndex(opts.Out)
	var ix Index
	for _, s := range specs {
		start := time.Now()
		file := fileName(s)
		inputs, err := ociimage.Inputs(ctx, s)
		if err != nil {
			return Index{}, err
		}
		if old, ok := prev.Find(s.Ref()); ok && old.Inputs == inputs && old.File == file {
			if st, err := os.Stat(filepath.Join(opts.Out, file)); err == nil && st.Size() == old.Size {
				ix.Images = append(ix.Images, old)
				fmt.Fprintf(logw, "%s %s %s unchanged\n", s.Ref(), old.Digest, file)
				continue
			}
		}
		r, err := ociimage.Write(ctx, s, filepath.Join(opts.Out, file))
		if err != nil {
			return Index{}, err
		}
		ix.Images = append(ix.Images, Image{Name: s.Name, Tag: s.Tag, Digest: r.Digest, ID: r.ID, File: file, Size: r.Size, Inputs: inputs})
		fmt.Fprintf(logw, "%s %s %s (%d MB, %.1f s)\n", s.Ref(), r.Digest, file, r.Size>>20, time.Since(start).Seconds())
	}
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return Index{}, err
	}
	if err := atomicfile.WriteFile(filepath.Join(opts.Out, IndexFile), append(b, '\n'), 0o644); err != nil {
		return Index{}, err
	}
	if err := prune(opts.Out, ix, logw); err != nil {
		return ix, err
	}
	return ix, nil
}

// prune removes the image tarballs (*.tar) of out that ix does not name:
// the images of versions no longer built, and those whose tag changed
// (Steward's, with every commit). It runs after the new index is written,
// so a tarball is removed only once no index names it; other files are
// left alone.
func prune(out string, ix Index, logw io.Writer) error {
	named := map[string]bool{}
	for _, i := range ix.Images {
		named[i.File] = true
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".tar") || named[e.Name()] {
			continue
		}
		if err := os.Remove(filepath.Join(out, e.Name())); err != nil {
			return fmt.Errorf("remove an image tarball the index no longer names: %w", err)
		}
		fmt.Fprintf(logw, "%s removed: not in %s\n", e.Name(), IndexFile)
	}
	return nil
}

// PausePackage is the pause program's package in Steward's module.
const PausePackage = "./cmd/localkube/pause"

// tmpDir is /tmp of an image, for programs that write temporary files.
var tmpDir = ociimage.File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}

// PauseSpec is the pause image of a tag, from the built pause program:
// /pause, its entrypoint, alone.
func PauseSpec(pause, tag string) ociimage.Spec {
	return ociimage.Spec{
		Name: "registry.k8s.io/pause", Tag: tag,
		Files:      []ociimage.File{{Path: "/pause", Mode: 0o755, Source: pause}},
		Entrypoint: []string{"/pause"},
	}
}

// ComponentSpec is the image of a Kubernetes component of a version
// under kubeadm's name and tag, from its binary: the binary at
// /usr/local/bin/<component> (on PATH) as entrypoint, and /tmp.
func ComponentSpec(component, version, binary string) ociimage.Spec {
	exe := "/usr/local/bin/" + component
	return ociimage.Spec{
		Name: "registry.k8s.io/" + component, Tag: version,
		Files:      []ociimage.File{{Path: exe, Mode: 0o755, Source: binary}, tmpDir},
		Entrypoint: []string{exe},
	}
}

// CoreDNSSpec is the CoreDNS image of a CoreDNS version, from its binary:
// /coredns, the entrypoint, as upstream's image has it (kubeadm's
// Deployment passes only -conf). Unlike upstream's image it runs as root:
// upstream runs as nonroot with cap_net_bind_service set on the binary, a
// file capability (an extended attribute) these images do not carry; the
// Deployment drops every capability but NET_BIND_SERVICE all the same.
func CoreDNSSpec(version, binary string) ociimage.Spec {
	return ociimage.Spec{
		Name: CoreDNSImage, Tag: version,
		Files:      []ociimage.File{{Path: "/coredns", Mode: 0o755, Source: binary}},
		Entrypoint: []string{"/coredns"},
	}
}

// fileName is the tarball of an image: its repository's last element and
// its tag ("kube-apiserver-v1.36.3.tar").
func fileName(s ociimage.Spec) string {
	return path.Base(s.Name) + "-" + s.Tag + ".tar"
}

// storeFiles lists the files of every version of the etcd binary store
// at their place under StoreDir.
func storeFiles(store string) ([]ociimage.File, error) {
	dirs, err := filepath.Glob(filepath.Join(store, "etcd-v*"))
	if err != nil {
		return nil, err
	}
	var files []ociimage.File
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "manifest.json")); err != nil {
			continue // not a stored version (one being imported)
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			mode := fs.FileMode(0o755)
			if e.Name() == "manifest.json" {
				mode = 0o644
			}
			files = append(files, ociimage.File{
				Path: path.Join(StoreDir, filepath.Base(d), e.Name()), Mode: mode, Source: filepath.Join(d, e.Name()),
			})
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no etcd version in the binary store %s: %w", store, ErrNoStore)
	}
	return files, nil
}

// normalizeManifests replaces each manifest.json of files by a copy in dir
// whose importedAt is the Unix epoch and whose source is ImageManifestSource:
// the store's manifests record when and from where this machine imported a
// version, which would make the Steward image of two machines differ for
// the same binaries. The file hashes, the version and any other field are
// kept as they are.
func normalizeManifests(dir string, files []ociimage.File) ([]ociimage.File, error) {
	out := slices.Clone(files)
	for i, f := range out {
		if path.Base(f.Path) != "manifest.json" {
			continue
		}
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, err
		}
		n, err := NormalizeManifest(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Source, err)
		}
		p := filepath.Join(dir, "store", path.Base(path.Dir(f.Path)), "manifest.json")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, n, 0o600); err != nil {
			return nil, err
		}
		out[i].Source = p
	}
	return out, nil
}

// ImageManifestSource is the source a binary store manifest in Steward's
// image records.
const ImageManifestSource = "steward.etcd.io/steward image"

// NormalizeManifest returns a binary store manifest with importedAt the
// Unix epoch and source ImageManifestSource, its other fields unchanged, as
// indented JSON; it refuses one that is not a JSON object.
func NormalizeManifest(b []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("binary store manifest: %w", err)
	}
	if m == nil {
		return nil, errors.New("binary store manifest: not a JSON object")
	}
	m["importedAt"] = json.RawMessage(`"1970-01-01T00:00:00Z"`)
	m["source"] = json.RawMessage(`"` + ImageManifestSource + `"`)
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// GoBuild builds a static binary (CGO_ENABLED=0, -trimpath) of pkg in
// Steward's module at source.
func GoBuild(ctx context.Context, source, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in %s: %w\n%s", pkg, source, err, b)
	}
	return nil
}

// stewardTag is `git describe --tags --always --dirty` of the source, or
// "dev" where that gives nothing (no Git checkout).
func stewardTag(ctx context.Context, source string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = source
	b, err := cmd.Output()
	tag := strings.TrimSpace(string(b))
	if err != nil || !tagRE.MatchString(tag) {
		return "dev"
	}
	return tag
}

// KubeadmTags are the tags of the images kubeadm of a version names
// besides the control plane's.
type KubeadmTags struct {
	Pause, CoreDNS string
}

// KubeadmImages asks kubeadm of a version which pause and CoreDNS images it
// expects (`kubeadm config images list`), and returns their tags.
func KubeadmImages(ctx context.Context, kubeadm, version string) (KubeadmTags, error) {
	cmd := exec.CommandContext(ctx, kubeadm, "config", "images", "list", "--kubernetes-version", version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return KubeadmTags{}, fmt.Errorf("%s config images list: %w: %s", kubeadm, err, strings.TrimSpace(stderr.String()))
	}
	return parseImagesList(kubeadm, b)
}

// parseImagesList reads the output of `kubeadm config images list`.
func parseImagesList(kubeadm string, b []byte) (KubeadmTags, error) {
	var tags KubeadmTags
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if tag, ok := strings.CutPrefix(line, "registry.k8s.io/pause:"); ok && tagRE.MatchString(tag) {
			tags.Pause = tag
		}
		if tag, ok := strings.CutPrefix(line, CoreDNSImage+":"); ok && tagRE.MatchString(tag) {
			tags.CoreDNS = tag
		}
	}
	switch {
	case tags.Pause == "":
		return tags, fmt.Errorf("%s config images list names no registry.k8s.io/pause image:\n%s", kubeadm, b)
	case tags.CoreDNS == "":
		return tags, fmt.Errorf("%s config images list names no %s image:\n%s", kubeadm, CoreDNSImage, b)
	}
	return tags, nil
}

// PauseTag is the tag of the pause image kubeadm of a version expects.
func PauseTag(ctx context.Context, kubeadm, version string) (string, error) {
	tags, err := KubeadmImages(ctx, kubeadm, version)
	return tags.Pause, err
}
