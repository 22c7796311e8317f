package localkube

// Where a cluster's parts come from: the binaries hack/build-kube.sh puts in
// KUBE_CACHE/<version>/bin, and the image tarballs `localkube images`
// (internal/kubeimages) writes into an images directory with its index,
// images.json. Every node imports the control-plane images of the version
// (registry.k8s.io/kube-apiserver:V ...), the pause and CoreDNS images that
// version's kubeadm expects, and Steward's image.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/kubeimages"
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
	cfg := Config{Version: version, KubeBin: kubeimages.KubeBin(kubeCache, version), ImageRepo: DefaultImageRepo}
	for _, b := range []string{"kubelet", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(filepath.Join(cfg.KubeBin, b)); err != nil {
			return cfg, &MissingBinaryError{Version: version, Path: filepath.Join(cfg.KubeBin, b)}
		}
	}
	ix, err := kubeimages.ReadIndex(imagesDir)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, &MissingImageError{Version: version, Index: filepath.Join(imagesDir, kubeimages.IndexFile)}
	}
	if err != nil {
		return cfg, err
	}
	add := func(ref string) bool {
		img, ok := ix.Find(ref)
		if ok {
			cfg.Images = append(cfg.Images, filepath.Join(imagesDir, img.File))
		}
		return ok
	}
	for _, c := range ControlPlaneImages {
		if ref := DefaultImageRepo + "/" + c + ":" + version; !add(ref) {
			return cfg, &MissingImageError{Version: version, Index: filepath.Join(imagesDir, kubeimages.IndexFile), Ref: ref}
		}
	}
	// The pause and CoreDNS images the version's kubeadm names, else the
	// index's only (or first) ones.
	var pauses, corednses []string
	for _, img := range ix.Images {
		switch img.Name {
		case DefaultImageRepo + "/pause":
			pauses = append(pauses, img.Ref())
		case kubeimages.CoreDNSImage:
			corednses = append(corednses, img.Ref())
		case kubeimages.StewardImage:
			cfg.ExtraImages = append(cfg.ExtraImages, filepath.Join(imagesDir, img.File))
		}
	}
	if kubeadm := filepath.Join(cfg.KubeBin, "kubeadm"); len(pauses) > 1 || len(corednses) > 1 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tags, err := kubeimages.KubeadmImages(ctx, kubeadm, version)
		cancel()
		if err == nil {
			pauses = []string{DefaultImageRepo + "/pause:" + tags.Pause}
			corednses = []string{kubeimages.CoreDNSImage + ":" + tags.CoreDNS}
		}
	}
	if len(pauses) == 0 || !add(pauses[0]) {
		return cfg, &MissingImageError{Version: version, Index: filepath.Join(imagesDir, kubeimages.IndexFile), Ref: DefaultImageRepo + "/pause"}
	}
	cfg.PauseImage = pauses[0]
	if len(corednses) == 0 {
		return cfg, &MissingImageError{Version: version, Index: filepath.Join(imagesDir, kubeimages.IndexFile), Ref: kubeimages.CoreDNSImage}
	}
	img, ok := ix.Find(corednses[0])
	if !ok {
		return cfg, &MissingImageError{Version: version, Index: filepath.Join(imagesDir, kubeimages.IndexFile), Ref: corednses[0]}
	}
	cfg.CoreDNSImage, cfg.CoreDNSTarball = img.Ref(), filepath.Join(imagesDir, img.File)
	return cfg, nil
}
