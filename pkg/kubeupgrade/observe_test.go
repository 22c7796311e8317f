package kubeupgrade

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/pki"
)

func TestResolveKubeconfig(t *testing.T) {
	dir := t.TempDir()
	sd := filepath.Join(dir, "steward")
	if p, s, err := ResolveKubeconfig("/x/kc", "/y/kc", sd); err != nil || p != "/x/kc" || s != FromFlag {
		t.Errorf("flag: %s %s %v", p, s, err)
	}
	if p, s, err := ResolveKubeconfig("", "/y/kc:/z/kc", sd); err != nil || p != "/y/kc" || s != FromEnv {
		t.Errorf("env: %s %s %v", p, s, err)
	}
	// Relative paths are made absolute: the plan records the path and a
	// resume may run elsewhere.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if p, _, err := ResolveKubeconfig("admin.conf", "", sd); err != nil || p != filepath.Join(wd, "admin.conf") {
		t.Errorf("relative flag: %s %v", p, err)
	}
	if p, _, err := ResolveKubeconfig("", "kc/a:/z/kc", sd); err != nil || p != filepath.Join(wd, "kc/a") {
		t.Errorf("relative KUBECONFIG: %s %v", p, err)
	}
	if _, _, err := ResolveKubeconfig("", "", sd); !errors.Is(err, ErrNoKubeconfig) || !strings.Contains(err.Error(), sd) {
		t.Errorf("none: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, s, err := ResolveKubeconfig("", "", sd); err != nil || p != filepath.Join(dir, "kubeconfig") || s != FromLocalKube {
		t.Errorf("localkube: %s %s %v", p, s, err)
	}
}

func TestImageTagAndFlags(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.36.3":            "v1.36.3",
		"localhost:5000/kube-apiserver:v1.35.4":             "v1.35.4",
		"localhost:5000/kube-apiserver":                     "",
		"registry.k8s.io/kube-scheduler:v1.36.3@sha256:abc": "v1.36.3",
	} {
		if got := ImageTag(in); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", in, got, want)
		}
	}
	f := Flags([]string{"kube-apiserver", "--advertise-address=10.0.0.1", "--secure-port", "6443", "--allow-privileged", "-v=2"})
	if f["advertise-address"] != "10.0.0.1" || f["secure-port"] != "6443" || f["allow-privileged"] != "" || len(f) != 3 {
		t.Errorf("Flags = %v", f)
	}
}

func staticPod(comp, node, version string, cmd ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: comp + "-" + node, Namespace: "kube-system", Labels: map[string]string{"component": comp, "tier": "control-plane"},
			Annotations: map[string]string{MirrorAnnotation: "a1b2c3"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: comp,
			Image: "registry.k8s.io/" + comp + ":" + version, Command: append([]string{comp}, cmd...)}}},
	}
}

// TestObserve: per host and component, from the mirror pods' image tags
// and the nodes' kubelet versions; where each API server serves.
func TestObserve(t *testing.T) {
	var objs []any
	for i, n := range []string{"node-b", "node-a"} {
		addr := []string{"10.1.0.11", "10.1.0.10"}[i]
		objs = append(objs,
			staticPod(kubeversion.APIServer, n, "v1.35.4", "--advertise-address="+addr, "--secure-port=6443"),
			staticPod(kubeversion.ControllerManager, n, "v1.35.4"),
			staticPod(kubeversion.Scheduler, n, "v1.36.3"),
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"}}})
	}
	// Another kube-system pod is not a component, nor is an ordinary pod
	// carrying a component's label (not a static pod's mirror).
	impostor := staticPod(kubeversion.APIServer, "node-a", "v1.30.0", "--advertise-address=10.9.9.9")
	impostor.Name, impostor.Annotations = "impostor", nil
	objs = append(objs, impostor)
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.14.2"}}}})
	cs := fake.NewClientset()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Pod:
			_, err = cs.CoreV1().Pods("kube-system").Create(t.Context(), o, metav1.CreateOptions{})
		case *corev1.Node:
			_, err = cs.CoreV1().Nodes().Create(t.Context(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := Observe(t.Context(), cs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range r.Instances {
		got = append(got, in.Host+" "+in.Component+" "+in.Version)
	}
	want := "node-a kube-apiserver v1.35.4,node-a kube-controller-manager v1.35.4,node-a kube-scheduler v1.36.3,node-a kubelet v1.35.4," +
		"node-b kube-apiserver v1.35.4,node-b kube-controller-manager v1.35.4,node-b kube-scheduler v1.36.3,node-b kubelet v1.35.4"
	if strings.Join(got, ",") != want {
		t.Errorf("instances\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	if len(r.APIServers) != 2 || r.APIServers[0].URL != "https://10.1.0.10:6443" || r.APIServers[1].Host != "node-b" {
		t.Errorf("API servers %+v", r.APIServers)
	}
	vs := Versions(r, nil)
	if vs[0].Version != "v1.36.3" || vs[0].State != kubeversion.StatePartial || vs[1].State != kubeversion.StatePartial {
		t.Errorf("versions %+v", vs)
	}

	// A control-plane node whose API server has no mirror pod (yet):
	// listed with no version, so that nothing is active and pre-flight
	// says so.
	if _, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c", Labels: map[string]string{ControlPlaneLabel: ""}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.4"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").Create(t.Context(), staticPod(kubeversion.ControllerManager, "node-c", "v1.35.4"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err = Observe(t.Context(), cs); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, in := range r.Instances {
		if in.Host == "node-c" {
			got = append(got, in.Component+" "+in.Version)
		}
	}
	if want := "kube-apiserver ,kube-controller-manager v1.35.4,kube-scheduler ,kubelet v1.35.4"; strings.Join(got, ",") != want {
		t.Errorf("node-c: %q, want %q", strings.Join(got, ","), want)
	}
	vs = kubeversion.States(r.Instances, nil)
	for _, v := range vs {
		if v.State == kubeversion.StateActive {
			t.Errorf("%s active with components missing: %+v", v.Version, v)
		}
	}
	found := false
	for _, v := range kubeversion.CheckSkew(r.Instances) {
		if errors.Is(v, kubeversion.ErrUnhealthy) && strings.Contains(v.Message, "host node-c: no kube-apiserver found (no mirror pod of its static pod)") {
			found = true
		}
	}
	if !found {
		t.Errorf("skew %v: node-c's API server not named missing", kubeversion.CheckSkew(r.Instances))
	}
}

func TestMissing(t *testing.T) {
	v, _ := kubeversion.Lookup("v1.36.3")
	if m := Missing("", "")(v); len(m) != 2 || !strings.Contains(m[0], "no Kubernetes binary cache") {
		t.Errorf("nothing given: %v", m)
	}
	empty := t.TempDir()
	if m := Missing(empty, empty)(v); len(m) != 2 || !strings.Contains(m[0], filepath.Join(empty, "v1.36.3", "bin", "kubelet")) || !strings.Contains(m[1], "images.json") {
		t.Errorf("empty dirs: %v", m)
	}
	// The machine's caches, when the tests are given them.
	kc, im := os.Getenv("STEWARD_KUBE_CACHE"), os.Getenv("STEWARD_IMAGES")
	if kc == "" || im == "" {
		t.Log("STEWARD_KUBE_CACHE or STEWARD_IMAGES unset: the present case is not checked")
		return
	}
	if m := Missing(kc, im)(v); len(m) != 0 {
		t.Errorf("v1.36.3 from %s and %s: missing %v", kc, im, m)
	}
}

func TestCertificates(t *testing.T) {
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	etcd := []pki.CertInfo{{Name: "server", File: "/d/server.crt", NotAfter: now.Add(48 * time.Hour)}, {Name: "ca", File: "/d/ca.crt"}}
	if c := certificates(etcd, []servedCert{{"node-a", now.Add(365 * 24 * time.Hour)}}, now); c.Result != kubeversion.Pass {
		t.Errorf("valid: %+v", c)
	}
	c := certificates(etcd, []servedCert{{"node-b", now.Add(2 * time.Hour)}}, now)
	if c.Result != kubeversion.Fail || !errors.Is(c.Kind, kubeversion.ErrUnhealthy) || !strings.Contains(c.Message, "host node-b: kube-apiserver's serving certificate expires 2026-11-28T02:00:00Z") {
		t.Errorf("expiring: %+v", c)
	}
	etcd[0].NotAfter = now.Add(time.Hour)
	if c := certificates(etcd, nil, now); c.Result != kubeversion.Fail || !strings.Contains(c.Message, "etcd server (/d/server.crt)") {
		t.Errorf("etcd expiring: %+v", c)
	}
}
