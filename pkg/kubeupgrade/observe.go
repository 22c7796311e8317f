// Package kubeupgrade reads what a kubeadm-shaped Kubernetes runs on each
// host (the mirror pods of its static control-plane pods, its nodes'
// kubelets), which known versions are active, partial or available, and
// gathers the dry run of an upgrade: the etcd cluster beneath (its
// members' health and versions, alarms, certificates, the storage-version
// inventory read from etcd itself) and every API server's /readyz, handed
// to pkg/kubeversion's pure functions; and the kube-upgrade plan kind
// that applies such an upgrade (kind.go, executor.go, apply.go): the
// control plane's static pod manifests rewritten through each host's
// Steward agent, one component at a time, each waited for.
package kubeupgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/etcd-steward/steward/internal/kubeimages"
	"github.com/etcd-steward/steward/pkg/kubeversion"
)

// Kubeconfig sources, in the order Resolve tries them.
const (
	FromFlag      = "flag"
	FromEnv       = "KUBECONFIG"
	FromLocalKube = "localkube"
	// kubeconfigName is the kubeconfig's name in a local Kubernetes's
	// directory (internal/localkube), beside the Steward directory.
	kubeconfigName = "kubeconfig"
)

// ControlPlaneLabel marks a control-plane node (kubeadm's).
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// ErrNoKubeconfig: no kubeconfig was given or found.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// ResolveKubeconfig picks the kubeconfig: explicit (a flag's value), else
// the KUBECONFIG environment variable (its first file), else the
// kubeconfig of a local Kubernetes whose directory holds the Steward
// directory stewardDir (localkube's DIR/steward and DIR/kubeconfig). It
// returns the path and where it came from (FromFlag, FromEnv,
// FromLocalKube).
//
// The path is absolute: a plan records it, and `plan resume` may run from
// another working directory.
func ResolveKubeconfig(explicit, env, stewardDir string) (path, source string, err error) {
	switch {
	case explicit != "":
		p, err := filepath.Abs(explicit)
		return p, FromFlag, err
	case env != "":
		p, err := filepath.Abs(strings.Split(env, string(os.PathListSeparator))[0])
		return p, FromEnv, err
	}
	if stewardDir != "" {
		p := filepath.Join(filepath.Dir(stewardDir), kubeconfigName)
		if _, err := os.Stat(p); err == nil {
			return p, FromLocalKube, nil
		}
	}
	return "", "", fmt.Errorf("%w: none given, KUBECONFIG unset, and no %s next to the Steward directory %s", ErrNoKubeconfig, kubeconfigName, stewardDir)
}

// RESTConfig loads a kubeconfig file.
func RESTConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// APIServer is one API server's static pod as read from its mirror pod.
type APIServer struct {
	Host string
	// URL is where it serves (https://ADDRESS:PORT of its advertise
	// address and secure port).
	URL string
}

// Running is what runs, per host and component.
type Running struct {
	// Instances: every control-plane static pod (by its mirror pod's
	// component label and node) and every node's kubelet, in host order.
	Instances  []kubeversion.Instance
	APIServers []APIServer
	// Pods are the control-plane mirror pods, by HOST/COMPONENT.
	Pods map[string]PodState
}

// PodState is a control-plane mirror pod as the upgrade waits for it.
type PodState struct {
	// Image is its component container's image (the manifest's).
	Image string
	// Ready: that container runs and is ready.
	Ready bool
	// Emulated is its --emulated-version ("" without one).
	Emulated string
}

// MirrorAnnotation marks the mirror pod the kubelet makes of a static pod
// (its value the static pod's hash): only those are the control plane.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Observe reads what runs: the kube-system mirror pods labelled component=
// kube-apiserver, kube-controller-manager or kube-scheduler (their image
// tag is the version; a pod without a node is an error), and each node's
// status.nodeInfo.kubeletVersion. A control-plane host missing one of
// the three gets it with an empty version.
func Observe(ctx context.Context, cs kubernetes.Interface) (*Running, error) {
	sel := "component in (" + strings.Join(kubeversion.ControlPlane, ",") + ")"
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list the control-plane pods: %w", err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the nodes: %w", err)
	}
	r := &Running{Pods: map[string]PodState{}}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[MirrorAnnotation] == "" {
			// Not a static pod's mirror: an ordinary pod that carries
			// the label is no control-plane component (a pending one
			// would fail every step, a running one be sent the
			// kubeconfig's credentials at its address).
			continue
		}
		in, api, err := fromPod(p)
		if err != nil {
			return nil, err
		}
		ps := PodState{Image: in.Image, Emulated: in.Flags[kubeversion.EmulatedVersionFlag]}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name == in.Component || len(p.Status.ContainerStatuses) == 1 {
				ps.Ready = st.Ready && st.State.Running != nil
			}
		}
		r.Pods[in.Host+"/"+in.Component] = ps
		r.Instances = append(r.Instances, in)
		if api != nil {
			r.APIServers = append(r.APIServers, *api)
		}
	}
	// A control-plane host (labelled so, as kubeadm marks it, or running
	// any control-plane pod) without one of the components has it
	// listed with no version: nothing says what it would run.
	seen := map[string]bool{}
	cpHost := map[string]bool{}
	for _, in := range r.Instances {
		seen[in.Host+"/"+in.Component] = true
		cpHost[in.Host] = true
	}
	for _, n := range nodes.Items {
		r.Instances = append(r.Instances, kubeversion.Instance{Host: n.Name, Component: kubeversion.Kubelet, Version: n.Status.NodeInfo.KubeletVersion})
		if _, ok := n.Labels[ControlPlaneLabel]; ok {
			cpHost[n.Name] = true
		}
	}
	for h := range cpHost {
		for _, c := range kubeversion.ControlPlane {
			if !seen[h+"/"+c] {
				r.Instances = append(r.Instances, kubeversion.Instance{Host: h, Component: c})
			}
		}
	}
	sort.SliceStable(r.Instances, func(i, j int) bool {
		a, b := r.Instances[i], r.Instances[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return index(a.Component) < index(b.Component)
	})
	sort.Slice(r.APIServers, func(i, j int) bool { return r.APIServers[i].Host < r.APIServers[j].Host })
	return r, nil
}

func index(c string) int {
	for i, x := range kubeversion.Components {
		if x == c {
			return i
		}
	}
	return len(kubeversion.Components)
}

// fromPod reads one control-plane pod: its node, its component's
// container image and tag, its flags; and, for an API server, where it
// serves.
func fromPod(p *corev1.Pod) (kubeversion.Instance, *APIServer, error) {
	comp := p.Labels["component"]
	if p.Spec.NodeName == "" {
		return kubeversion.Instance{}, nil, fmt.Errorf("pod kube-system/%s (component %s) is on no node", p.Name, comp)
	}
	var ctr *corev1.Container
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == comp || ctr == nil {
			ctr = &p.Spec.Containers[i]
		}
	}
	if ctr == nil {
		return kubeversion.Instance{}, nil, fmt.Errorf("pod kube-system/%s (component %s) has no container", p.Name, comp)
	}
	tag := ImageTag(ctr.Image)
	in := kubeversion.Instance{Host: p.Spec.NodeName, Component: comp, Version: tag, Image: ctr.Image, Flags: Flags(append(append([]string{}, ctr.Command...), ctr.Args...))}
	if comp != kubeversion.APIServer {
		return in, nil, nil
	}
	addr := in.Flags["advertise-address"]
	if addr == "" {
		addr = p.Status.PodIP
	}
	if addr == "" {
		addr = p.Status.HostIP
	}
	port := in.Flags["secure-port"]
	if port == "" {
		port = "6443"
	}
	return in, &APIServer{Host: p.Spec.NodeName, URL: "https://" + hostPort(addr, port)}, nil
}

func hostPort(addr, port string) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + port
	}
	return addr + ":" + port
}

// ImageTag is an image reference's tag ("" without one; a digest is
// dropped).
func ImageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return ref[i+1:]
	}
	return ""
}

// Flags reads --name=value (and --name value) flags of a command line;
// a flag without a value maps to "".
func Flags(cmd []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(cmd); i++ {
		a := cmd[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(cmd) && !strings.HasPrefix(cmd[i+1], "-") {
			val = cmd[i+1]
			i++
		}
		out[name] = val
	}
	return out
}

// Missing returns what a known version lacks on this machine for an
// upgrade to it: its kubelet binary in kubeCache (hack/build-kube.sh's
// layout, KUBE_CACHE/VERSION/bin) and its control-plane images in the
// images directory's index (images.json). An empty directory means none
// was given: everything in it counts as missing.
func Missing(kubeCache, imagesDir string) func(kubeversion.Version) []string {
	var ix *kubeimages.Index
	var ixErr error
	if imagesDir != "" {
		x, err := kubeimages.ReadIndex(imagesDir)
		ix, ixErr = &x, err
	}
	return func(v kubeversion.Version) []string {
		var out []string
		if kubeCache == "" {
			out = append(out, "binaries: no Kubernetes binary cache given")
		} else if _, err := os.Stat(filepath.Join(kubeimages.KubeBin(kubeCache, v.Version), "kubelet")); err != nil {
			out = append(out, "binary "+filepath.Join(kubeimages.KubeBin(kubeCache, v.Version), "kubelet"))
		}
		switch {
		case imagesDir == "":
			out = append(out, "images: no image directory given")
		case ixErr != nil:
			out = append(out, fmt.Sprintf("images: %v", ixErr))
		default:
			for _, c := range kubeversion.ControlPlane {
				if _, ok := ix.Find(v.Images[c]); !ok {
					out = append(out, "image "+v.Images[c])
				}
			}
		}
		return out
	}
}

// Versions lists every known and running version with its state.
func Versions(r *Running, missing func(kubeversion.Version) []string) []kubeversion.VersionState {
	return kubeversion.States(r.Instances, missing)
}

// Kubeconfig is the kubeconfig chosen and where it came from.
type Kubeconfig struct {
	Path string `json:"path"`
	// Source is flag, KUBECONFIG or localkube.
	Source string `json:"source"`
}

// Client is a clientset of the kubeconfig.
func (k Kubeconfig) Client() (*kubernetes.Clientset, error) {
	cfg, err := RESTConfig(k.Path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
