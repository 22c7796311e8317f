package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/internal/localkube"
)

// TestUpBadInput: each missing part of a cluster is named with what
// provides it, and nothing is created.
func TestUpBadInput(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cluster")
	o := upOptions{dir: dir, nodes: 1, version: "v1.99.0", kubeCache: filepath.Join(tmp, "kube"), images: filepath.Join(tmp, "images"),
		steward: filepath.Join(tmp, "steward"), versitygw: filepath.Join(tmp, "versitygw")}
	_, err := o.config(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Kubernetes v1.99.0 is not built") || !strings.Contains(err.Error(), "make kube-binaries KUBE_VERSIONS=v1.99.0") {
		t.Errorf("a version not built: %v", err)
	}

	bin := filepath.Join(tmp, "kube", "v1.99.0", "bin")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kubelet", "kube-proxy", "kubectl"} {
		if err := os.WriteFile(filepath.Join(bin, b), nil, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(o.images, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = o.config(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no images for Kubernetes v1.99.0") || !strings.Contains(err.Error(), "images.json is missing") || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no images built: %v", err)
	}
	sha := "sha256:" + strings.Repeat("0", 64)
	index := `{"images":[{"name":"registry.k8s.io/pause","tag":"3.10","digest":"` + sha + `","id":"` + sha + `","inputs":"` + sha + `","file":"pause.tar","size":1}]}`
	if err := os.WriteFile(filepath.Join(o.images, "images.json"), []byte(index), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = o.config(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the image registry.k8s.io/kube-apiserver:v1.99.0 of Kubernetes v1.99.0 is not built") || !strings.Contains(err.Error(), "make images") {
		t.Errorf("the version's images not built: %v", err)
	}

	// An images directory from before the cluster DNS: every image but
	// CoreDNS's.
	entry := func(name, tag string) string {
		return `{"name":"` + name + `","tag":"` + tag + `","digest":"` + sha + `","id":"` + sha + `","inputs":"` + sha + `","file":"` + strings.ReplaceAll(name, "/", "_") + `.tar","size":1}`
	}
	index = `{"images":[` + entry("registry.k8s.io/pause", "3.10")
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		index += "," + entry("registry.k8s.io/"+c, "v1.99.0")
	}
	if err := os.WriteFile(filepath.Join(o.images, "images.json"), []byte(index+"]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = o.config(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the image registry.k8s.io/coredns/coredns of Kubernetes v1.99.0 is not built") || !strings.Contains(err.Error(), "make images") {
		t.Errorf("no CoreDNS image: %v", err)
	}

	o.nodes = 2
	if _, err := o.config(context.Background()); err == nil || !strings.Contains(err.Error(), "--nodes 2: a local cluster has 1 or 3 nodes") {
		t.Errorf("--nodes 2: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused up created %s: %v", dir, err)
	}
}

// TestAdviseMissingPackages: a machine without containerd or runc is told
// the apt-get line.
func TestAdviseMissingPackages(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := localkube.CheckNodePackages()
	if err == nil {
		t.Fatal("no package missing with an empty PATH")
	}
	msg := advise(err).Error()
	for _, want := range []string{"containerd", "runc", "apt-get update && apt-get install -y --no-install-recommends containerd runc containernetworking-plugins iptables conntrack iproute2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

// TestUpPathsAbsolute: the nodes run their binaries from their own
// namespaces and directories, so relative path flags are made absolute
// before anything uses them (a relative --kube-cache once left every
// kubelet unstarted until the 3-minute wait ran out).
func TestUpPathsAbsolute(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	o := upOptions{dir: "cluster", nodes: 1, version: "v1.99.0", kubeCache: "kube", images: "images", steward: "bin/steward", versitygw: "versitygw", store: "store"}
	if _, err := o.config(context.Background()); err == nil {
		t.Fatal("config of an empty cache succeeded")
	}
	for name, p := range map[string]string{"kube-cache": o.kubeCache, "images": o.images, "steward": o.steward, "versitygw": o.versitygw, "store": o.store} {
		if !filepath.IsAbs(p) || !strings.HasPrefix(p, tmp) {
			t.Errorf("--%s %s: want an absolute path under %s", name, p, tmp)
		}
	}
}
