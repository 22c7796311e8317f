// Package kubeversion is Steward's knowledge of Kubernetes versions, as
// data: the releases it knows (those hack/build-kube.sh builds), each
// one's component images by kubeadm's names, the etcd version that
// release's kubeadm is tested with, the API versions each release stopped
// serving; the skew policy between components as pure functions
// (skew.go); which known versions run where (state.go); and the dry run
// of an upgrade computed from what runs (plan.go). It reads no cluster:
// pkg/kubeupgrade gathers what runs and hands it here.
//
// Invariants kept here: every known version has an image for each of
// Components' control-plane components and an etcd version (TestKnown);
// a target is a version of the catalogue; an upgrade never skips a minor
// and never goes backwards (CheckTarget).
package kubeversion

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The components whose versions Steward reads and the skew policy binds.
const (
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kubelet           = "kubelet"
)

// Components are the components a host runs, in upgrade order: the
// control plane's static pods, then the kubelet.
var Components = []string{APIServer, ControllerManager, Scheduler, Kubelet}

// ControlPlane are the components that run as static pods, with an image.
var ControlPlane = []string{APIServer, ControllerManager, Scheduler}

// ImageRepo is kubeadm's image repository.
const ImageRepo = "registry.k8s.io"

// Version is one Kubernetes release Steward knows.
type Version struct {
	// Version is the release, vMAJOR.MINOR.PATCH.
	Version string `json:"version"`
	// Images are kubeadm's image references for the release, by
	// component: the control plane's, kube-proxy, pause, etcd, coredns.
	Images map[string]string `json:"images"`
	// EtcdVersion is the etcd release kubeadm of this version installs
	// and is tested with (its constants' SupportedEtcdVersion for its own
	// minor, the image's "-0" build suffix dropped).
	EtcdVersion string `json:"etcdVersion"`
}

// Semver is a parsed vMAJOR.MINOR.PATCH.
type Semver struct{ Major, Minor, Patch int }

func (s Semver) String() string { return fmt.Sprintf("v%d.%d.%d", s.Major, s.Minor, s.Patch) }

// MinorString is "1.36".
func (s Semver) MinorString() string { return fmt.Sprintf("%d.%d", s.Major, s.Minor) }

// Compare orders two versions: -1, 0 or 1.
func (s Semver) Compare(o Semver) int {
	switch {
	case s.Major != o.Major:
		return cmpInt(s.Major, o.Major)
	case s.Minor != o.Minor:
		return cmpInt(s.Minor, o.Minor)
	}
	return cmpInt(s.Patch, o.Patch)
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Parse reads a Kubernetes version: v1.36.3, 1.36.3, or what a component
// reports (v1.36.3-rc.1, v1.36.3+build): the pre-release and build parts
// are dropped.
func Parse(v string) (Semver, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Semver{}, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH, for example v1.36.3", v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || p == "" {
			return Semver{}, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH, for example v1.36.3", v)
		}
		n[i] = x
	}
	return Semver{n[0], n[1], n[2]}, nil
}

// KeepRepository is target with running's repository: a cluster pulling
// from another repository (kubeadm's imageRepository, an air-gapped
// mirror) keeps pulling from it and only the tag changes. A running
// image without a repository, or an empty one, gives target unchanged.
// A digest on running is dropped (it names the old image).
func KeepRepository(running, target string) string {
	repo := imageRepository(running)
	tag := imageTag(target)
	if repo == "" || tag == "" {
		return target
	}
	return repo + ":" + tag
}

// imageRepository is ref without its tag and digest ("" for "").
func imageRepository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// imageTag is ref's tag, "" when it has none.
func imageTag(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[i+1:]
	}
	return ""
}

// images are kubeadm's names for a release's images (kubeadm's
// images.GetControlPlaneImage and constants: "registry.k8s.io/NAME:TAG").
func images(version, pause, etcd, coredns string) map[string]string {
	m := map[string]string{}
	for _, c := range []string{APIServer, ControllerManager, Scheduler, "kube-proxy"} {
		m[c] = ImageRepo + "/" + c + ":" + version
	}
	m["pause"] = ImageRepo + "/pause:" + pause
	m["etcd"] = ImageRepo + "/etcd:" + etcd
	m["coredns"] = ImageRepo + "/coredns/coredns:" + coredns
	return m
}

// known are the releases hack/build-kube.sh builds (Makefile
// KUBE_VERSIONS), oldest first. The pause, etcd and CoreDNS versions are
// kubeadm's constants of each release (cmd/kubeadm/app/constants/
// constants.go in the k8s.io/kubernetes module of that version:
// PauseVersion, SupportedEtcdVersion[its own minor], CoreDNSVersion).
var known = []Version{
	// k8s.io/kubernetes@v1.35.4 constants.go: PauseVersion "3.10.1",
	// SupportedEtcdVersion[35] = DefaultEtcdVersion "3.6.6-0",
	// CoreDNSVersion "v1.13.1".
	{Version: "v1.35.4", Images: images("v1.35.4", "3.10.1", "3.6.6-0", "v1.13.1"), EtcdVersion: "3.6.6"},
	// k8s.io/kubernetes@v1.36.3 constants.go: PauseVersion "3.10.2",
	// SupportedEtcdVersion{34,35,36: "3.6.8-0"}, CoreDNSVersion "v1.14.2".
	{Version: "v1.36.3", Images: images("v1.36.3", "3.10.2", "3.6.8-0", "v1.14.2"), EtcdVersion: "3.6.8"},
}

// Known returns the releases Steward knows, oldest first (a copy).
func Known() []Version {
	out := make([]Version, len(known))
	copy(out, known)
	return out
}

// Lookup returns the known release v (with or without its leading v).
func Lookup(v string) (Version, bool) {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	i := slices.IndexFunc(known, func(k Version) bool { return k.Version == v })
	if i < 0 {
		return Version{}, false
	}
	return known[i], true
}

// KnownNames lists the known releases' versions.
func KnownNames() []string {
	var out []string
	for _, k := range known {
		out = append(out, k.Version)
	}
	return out
}

// NewestOfMinor returns the newest known release of major.minor.
func NewestOfMinor(major, minor int) (Version, bool) {
	var best Version
	var bestV Semver
	found := false
	for _, k := range known {
		s, _ := Parse(k.Version)
		if s.Major == major && s.Minor == minor && (!found || s.Compare(bestV) > 0) {
			best, bestV, found = k, s, true
		}
	}
	return best, found
}

// FlagChange is one flag of a component's static pod manifest that a
// release's kubeadm writes differently from the previous minor's.
type FlagChange struct {
	Component string `json:"component"`
	Flag      string `json:"flag"`
	// From and To are the values before and after; "" when absent.
	From string `json:"from"`
	To   string `json:"to"`
}

// flagChanges are, per minor, the manifest flags kubeadm of that minor
// writes differently from the previous one (beyond the image). Source for
// 1.36: cmd/kubeadm/app/phases/controlplane/manifests.go is the same in
// k8s.io/kubernetes v1.35.4 and v1.36.3 (diffed), so no flag changes.
var flagChanges = map[int][]FlagChange{
	36: {},
}

// FlagChanges returns the manifest flag changes of moving from one minor
// to the next, and whether Steward knows them (a minor missing from the
// table is unknown, not "none").
func FlagChanges(toMinor int) ([]FlagChange, bool) {
	c, ok := flagChanges[toMinor]
	return c, ok
}
