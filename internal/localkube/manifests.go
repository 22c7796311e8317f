package localkube

// The control plane's static pods, as kubeadm's `init phase control-plane`
// writes them for an external etcd (kubeadm v1.36's flags, labels, probes,
// volumes and priority), with three differences: images are never pulled
// (imagePullPolicy Never: they were imported); the host paths kubeadm
// mounts that this machine does not have are left out (a DirectoryOrCreate
// volume would create them on the machine); and the startup probe looks
// every second instead of every 10 s (startupProbe below).

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func (c *Cluster) writeManifests(n *Node) error {
	api := map[string]string{
		"advertise-address":                  n.Addr,
		"allow-privileged":                   "true",
		"authorization-mode":                 "Node,RBAC",
		"client-ca-file":                     "/etc/kubernetes/pki/ca.crt",
		"enable-admission-plugins":           "NodeRestriction",
		"enable-bootstrap-token-auth":        "true",
		"etcd-cafile":                        "/etc/kubernetes/pki/etcd/ca.crt",
		"etcd-certfile":                      "/etc/kubernetes/pki/apiserver-etcd-client.crt",
		"etcd-keyfile":                       "/etc/kubernetes/pki/apiserver-etcd-client.key",
		"etcd-servers":                       c.etcdServers(),
		"kubelet-client-certificate":         "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
		"kubelet-client-key":                 "/etc/kubernetes/pki/apiserver-kubelet-client.key",
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
		"proxy-client-cert-file":             "/etc/kubernetes/pki/front-proxy-client.crt",
		"proxy-client-key-file":              "/etc/kubernetes/pki/front-proxy-client.key",
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-client-ca-file":       "/etc/kubernetes/pki/front-proxy-ca.crt",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        itoa(apiPort),
		"service-account-issuer":             "https://kubernetes.default.svc.cluster.local",
		"service-account-key-file":           "/etc/kubernetes/pki/sa.pub",
		"service-account-signing-key-file":   "/etc/kubernetes/pki/sa.key",
		"service-cluster-ip-range":           serviceCIDR,
		"tls-cert-file":                      "/etc/kubernetes/pki/apiserver.crt",
		"tls-private-key-file":               "/etc/kubernetes/pki/apiserver.key",
	}
	cm := map[string]string{
		"authentication-kubeconfig":        "/etc/kubernetes/controller-manager.conf",
		"authorization-kubeconfig":         "/etc/kubernetes/controller-manager.conf",
		"bind-address":                     "127.0.0.1",
		"client-ca-file":                   "/etc/kubernetes/pki/ca.crt",
		"cluster-name":                     "kubernetes",
		"cluster-signing-cert-file":        "/etc/kubernetes/pki/ca.crt",
		"cluster-signing-key-file":         "/etc/kubernetes/pki/ca.key",
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       "/etc/kubernetes/controller-manager.conf",
		"leader-elect":                     "true",
		"requestheader-client-ca-file":     "/etc/kubernetes/pki/front-proxy-ca.crt",
		"root-ca-file":                     "/etc/kubernetes/pki/ca.crt",
		"service-account-private-key-file": "/etc/kubernetes/pki/sa.key",
		"use-service-account-credentials":  "true",
	}
	sched := map[string]string{
		"authentication-kubeconfig": "/etc/kubernetes/scheduler.conf",
		"authorization-kubeconfig":  "/etc/kubernetes/scheduler.conf",
		"bind-address":              "127.0.0.1",
		"kubeconfig":                "/etc/kubernetes/scheduler.conf",
		"leader-elect":              "true",
	}
	certVols := []hostVol{{"ca-certs", "/etc/ssl/certs"}, {"etc-ca-certificates", "/etc/ca-certificates"},
		{"usr-local-share-ca-certificates", "/usr/local/share/ca-certificates"}, {"usr-share-ca-certificates", "/usr/share/ca-certificates"}}
	var present []hostVol
	for _, v := range certVols {
		if _, err := os.Stat(v.path); err == nil {
			present = append(present, v)
		}
	}
	pods := []*corev1.Pod{
		c.staticPod("kube-apiserver", api, "250m", n.Addr, apiPort, "/livez", "/readyz",
			append(present, hostVol{"k8s-certs", "/etc/kubernetes/pki"}), corev1.HostPathDirectoryOrCreate),
		c.staticPod("kube-controller-manager", cm, "200m", "127.0.0.1", 10257, "/healthz", "",
			append(present, hostVol{"k8s-certs", "/etc/kubernetes/pki"}, hostVol{"kubeconfig", "/etc/kubernetes/controller-manager.conf"}), ""),
		c.staticPod("kube-scheduler", sched, "100m", "127.0.0.1", 10259, "/livez", "/readyz",
			[]hostVol{{"kubeconfig", "/etc/kubernetes/scheduler.conf"}}, ""),
	}
	pods[0].Annotations = map[string]string{"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": fmt.Sprintf("%s:%d", n.Addr, apiPort)}
	for _, p := range pods {
		b, err := yaml.Marshal(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.etcKubernetes(), "manifests", p.Name+".yaml"), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

type hostVol struct{ name, path string }

func (c *Cluster) staticPod(component string, flags map[string]string, cpu, probeHost string, port int, live, ready string, vols []hostVol, _ corev1.HostPathType) *corev1.Pod {
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	cmd := []string{component}
	for _, k := range keys {
		cmd = append(cmd, "--"+k+"="+flags[k])
	}
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: probeHost, Path: path, Port: intstr.FromInt(port), Scheme: corev1.URISchemeHTTPS}},
			InitialDelaySeconds: 10, PeriodSeconds: 10, TimeoutSeconds: 15, FailureThreshold: failures,
		}
	}
	ctr := corev1.Container{
		Name: component, Image: c.imageRef(component), ImagePullPolicy: corev1.PullNever, Command: cmd,
		Resources:     corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		LivenessProbe: probe(live, 8),
		StartupProbe:  startupProbe(probe(live, 24)),
	}
	if ready != "" {
		ctr.ReadinessProbe = probe(ready, 3)
		ctr.ReadinessProbe.InitialDelaySeconds = 0
		ctr.ReadinessProbe.PeriodSeconds = 1
	}
	var volumes []corev1.Volume
	for _, v := range vols {
		t := corev1.HostPathDirectoryOrCreate
		if filepath.Ext(v.path) == ".conf" {
			t = corev1.HostPathFileOrCreate
		}
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v.path, Type: &t}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: v.name, MountPath: v.path, ReadOnly: true})
	}
	prio := int32(2000001000)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: component, Namespace: "kube-system",
			Labels: map[string]string{"component": component, "tier": "control-plane"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{ctr}, HostNetwork: true, Priority: &prio,
			PriorityClassName: "system-node-critical",
			SecurityContext:   &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Volumes:           volumes,
		},
	}
}

// startupProbe is kubeadm's startup probe p (first look after 10 s, then
// every 10 s, 24 failures: 4 minutes) looking every second from the
// start, with the same 4 minutes before the kubelet gives up. A container
// counts as started, and then ready, only once its startup probe passed:
// with kubeadm's timing a component that answers within 3 s of starting
// is ready only 20 s later (the probe's first tick comes before its
// initial delay has passed, the next one 10 s after), and a local
// Kubernetes restarts components dozens of times in the tests
// (test/e2e/kubeupgrade: every static pod twice or more). What Steward
// waits for (a mirror pod ready) is the same with either timing.
func startupProbe(p *corev1.Probe) *corev1.Probe {
	budget := p.InitialDelaySeconds + p.PeriodSeconds*p.FailureThreshold
	p.InitialDelaySeconds, p.PeriodSeconds = 0, 1
	p.FailureThreshold = budget
	return p
}
