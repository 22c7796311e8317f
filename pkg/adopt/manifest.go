package adopt

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// KubeadmManifest is where kubeadm writes etcd's static pod manifest.
const KubeadmManifest = "/etc/kubernetes/manifests/etcd.yaml"

// FromManifestFile reads a static pod manifest (kubeadm's etcd.yaml) at
// path. Files the member names (data dir, certificates, a config file) are
// translated from the container's paths to the host's through the pod's
// hostPath volumes, and a config file is read on the host.
func FromManifestFile(p string) (MemberRun, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return MemberRun{}, refusal.New(ErrSource, "read static pod manifest: %v", err)
	}
	return ParseManifest(b, p, os.ReadFile)
}

// ParseManifest reads a static pod manifest's bytes; p is its path, for
// Source; readFile reads a file on the host (a config file the member
// names), nil when there is none to read.
func ParseManifest(b []byte, p string, readFile func(string) ([]byte, error)) (MemberRun, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return MemberRun{}, refusal.New(ErrSource, "static pod manifest %s is not a pod: %v", p, err)
	}
	if pod.Kind != "Pod" {
		return MemberRun{}, refusal.New(ErrSource, "static pod manifest %s holds a %q, not a Pod", p, pod.Kind)
	}
	c, err := etcdContainer(pod, p)
	if err != nil {
		return MemberRun{}, err
	}
	args := slices.Concat(c.Command, c.Args)
	if len(c.Command) > 0 {
		args = args[1:] // the program
	}
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			return MemberRun{}, refusal.New(ErrSource, "static pod manifest %s: container %s takes %s from a reference (valueFrom), which a host cannot resolve: give the value", p, c.Name, e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	hp := hostPaths(pod, c)
	readConfig := func(cp string) ([]byte, error) {
		if readFile == nil {
			return nil, os.ErrNotExist
		}
		return readFile(hp(cp))
	}
	r, err := build(args, env, readConfig, hp, c.WorkingDir, Source{Kind: KindManifest, Path: p})
	if err != nil {
		return MemberRun{}, err
	}
	if r.Source.ConfigFile != "" {
		r.Source.ConfigFile = hp(r.Source.ConfigFile)
	}
	r.Binary = c.Image
	r.Version = imageVersion(c.Image)
	return r, nil
}

// etcdContainer finds the pod's etcd container: the one named etcd, else
// the only one running an etcd program.
func etcdContainer(pod corev1.Pod, p string) (corev1.Container, error) {
	var found []corev1.Container
	for _, c := range pod.Spec.Containers {
		if c.Name == "etcd" {
			return c, nil
		}
		if len(c.Command) > 0 && path.Base(c.Command[0]) == "etcd" {
			found = append(found, c)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return corev1.Container{}, refusal.New(ErrSource, "static pod manifest %s has no etcd container (none named etcd or running etcd)", p)
	}
	return corev1.Container{}, refusal.New(ErrSource, "static pod manifest %s has %d containers running etcd: Steward adopts one member at a time", p, len(found))
}

// hostPaths returns the translation of a container path to the host's:
// through the deepest volume mount holding it whose volume is a hostPath.
// A path under no such mount is returned as it is (it lives in the image,
// or the pod shares the host's paths).
func hostPaths(pod corev1.Pod, c corev1.Container) func(string) string {
	hostDirs := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostDirs[v.Name] = v.HostPath.Path
		}
	}
	return func(p string) string {
		best, bestLen := p, -1
		for _, m := range c.VolumeMounts {
			hd, ok := hostDirs[m.Name]
			if !ok || m.MountPath == "" {
				continue
			}
			mp := filepath.Clean(m.MountPath)
			rel, err := filepath.Rel(mp, filepath.Clean(p))
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue
			}
			if len(mp) > bestLen {
				best, bestLen = filepath.Join(hd, m.SubPath, rel), len(mp)
			}
		}
		return best
	}
}

var imageTag = regexp.MustCompile(`:v?(\d+\.\d+\.\d+)(-\d+)?$`)

// imageVersion reads the etcd version from an image tag
// (registry.k8s.io/etcd:3.5.16-0 is 3.5.16), "" when it holds none.
func imageVersion(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	if m := imageTag.FindStringSubmatch(image); m != nil {
		return m[1]
	}
	return ""
}
