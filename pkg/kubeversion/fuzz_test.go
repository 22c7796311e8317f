package kubeversion

import (
	"strings"
	"testing"
)

// FuzzParse: a version as a component reports it (an image tag, a
// kubelet's nodeInfo). Never panics; what is accepted prints back as
// vMAJOR.MINOR.PATCH, reparses to itself, and the skew checks and states
// over it never panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"v1.36.3", "1.35.4", "v1.36.3-rc.1+abc", "v1.36", "", "v-1.2.3", "v1.2.3.4", "v99999999999999999999.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		insts := []Instance{{Host: "h", Component: APIServer, Version: s}, {Host: "h", Component: Kubelet, Version: s}}
		_ = CheckSkew(insts)
		_ = States(insts, nil)
		if err != nil {
			return
		}
		if !strings.HasPrefix(v.String(), "v") {
			t.Fatalf("%q: %s", s, v)
		}
		w, err := Parse(v.String())
		if err != nil || w != v {
			t.Fatalf("%q -> %s -> %v, %v", s, v, w, err)
		}
		_ = CheckTarget(insts, Semver{1, 36, 3})
	})
}

// FuzzKeepRepository: an image reference as a static pod names it (read
// from the cluster). Never panics; with a running image, the result is
// running's repository (no tag, no digest) and target's tag.
func FuzzKeepRepository(f *testing.F) {
	for _, s := range []string{"registry.k8s.io/kube-apiserver:v1.35.4", "mirror.local:5000/k8s/kube-apiserver:v1.35.4", "reg:5000/x@sha256:ab", "x", "", ":", "a/:b", "@", "a:b:c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, running string) {
		const target = "registry.k8s.io/kube-apiserver:v1.36.3"
		got := KeepRepository(running, target)
		if imageRepository(running) == "" {
			if got != target {
				t.Fatalf("%q: %q", running, got)
			}
			return
		}
		if got != imageRepository(running)+":v1.36.3" || imageTag(got) != "v1.36.3" || strings.Contains(got, "@") {
			t.Fatalf("%q: %q", running, got)
		}
	})
}
