package localkube

// Where a cluster's parts come from: the binaries hack/build-kube.sh puts in
// KUBE_CACHE/<version>/bin, and the image tarballs `localkube images`
// writes into an images directory. Each tarball (docker-archive) names its
// image in manifest.json's RepoTags, which is what is read here: the
// control-plane images of the version (registry.k8s.io/kube-apiserver:V
// ...), the pause image, and every other image in the directory (Steward's)
// are imported into each node.

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ControlPlaneImages are the components whose images the static pods run.
var ControlPlaneImages = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// DefaultImageRepo is kubeadm's image repository.
const DefaultImageRepo = "registry.k8s.io"

// FromCache is the configuration of a cluster of version from the caches
// (Dir, Nodes, Steward and VersityGW left for the caller). A version whose
// binaries or images are missing gets a MissingBinaryError or
// MissingImageError.
func FromCache(kubeCache, imagesDir, version string) (Config, error) {
	if !strings.HasPrefix(version, "v") {
		version = "v" + version
	}
	cfg := Config{Version: version, KubeBin: filepath.Join(kubeCache, version, "bin"), ImageRepo: DefaultImageRepo}
	for _, b := range []string{"kubelet", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(filepath.Join(cfg.KubeBin, b)); err != nil {
			return cfg, &MissingBinaryError{Version: version, Path: filepath.Join(cfg.KubeBin, b)}
		}
	}
	tags, err := scanImages(imagesDir)
	if err != nil {
		return cfg, err
	}
	want := map[string]bool{}
	for _, c := range ControlPlaneImages {
		want[DefaultImageRepo+"/"+c+":"+version] = true
	}
	found := map[string]bool{}
	var refs []string
	for ref := range tags {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		repo, _, _ := strings.Cut(lastPart(ref), ":")
		switch {
		case want[ref]:
			found[ref] = true
		case repo == "pause" && cfg.PauseImage == "":
			cfg.PauseImage = ref
		case isKubeComponent(repo):
			continue // another version's
		}
		cfg.Images = append(cfg.Images, tags[ref])
	}
	for ref := range want {
		if !found[ref] {
			return cfg, &MissingImageError{Version: version, Path: filepath.Join(imagesDir, "("+ref+")")}
		}
	}
	if cfg.PauseImage == "" {
		return cfg, &MissingImageError{Version: version, Path: filepath.Join(imagesDir, "(a pause image)")}
	}
	cfg.Images = dedupe(cfg.Images)
	return cfg, nil
}

func lastPart(ref string) string {
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		return ref[i+1:]
	}
	return ref
}

func isKubeComponent(repo string) bool {
	switch repo {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet":
		return true
	}
	return false
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// scanImages maps each image reference named by a tarball in dir (and its
// subdirectories) to the tarball.
func scanImages(dir string) (map[string]string, error) {
	tags := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".tar") || strings.HasSuffix(p, ".tar.gz")) {
			return nil
		}
		refs, err := tarballTags(p)
		if err != nil {
			return fmt.Errorf("image tarball %s: %w", p, err)
		}
		for _, r := range refs {
			tags[r] = p
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, &MissingImageError{Path: dir}
	}
	return tags, err
}

// tarballTags reads the RepoTags of a docker-archive tarball's
// manifest.json.
func tarballTags(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, errors.New("no manifest.json: not a docker-archive image tarball")
		}
		if err != nil {
			return nil, err
		}
		if h.Name == "manifest.json" {
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return nil, err
			}
			return parseManifestTags(b)
		}
	}
}

// parseManifestTags returns the RepoTags of a docker-archive manifest.json.
func parseManifestTags(b []byte) ([]string, error) {
	var m []struct {
		RepoTags []string `json:"RepoTags"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	var tags []string
	for _, e := range m {
		for _, t := range e.RepoTags {
			if t == "" || strings.ContainsAny(t, " \t\n") {
				return nil, fmt.Errorf("manifest.json: image tag %q", t)
			}
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		return nil, errors.New("manifest.json names no image (RepoTags empty)")
	}
	return tags, nil
}
