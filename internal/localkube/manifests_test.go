package localkube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The static pods' startup probe looks every second from the start and
// gives a component kubeadm's 250 s before the kubelet restarts it; the
// liveness and readiness probes are kubeadm's.
func TestStaticPodProbes(t *testing.T) {
	c := &Cluster{}
	p := c.staticPod("kube-apiserver", map[string]string{"secure-port": "6443"}, "250m", "10.0.0.1", 6443, "/livez", "/readyz", nil, corev1.HostPathDirectoryOrCreate)
	ctr := p.Spec.Containers[0]
	s, l, r := ctr.StartupProbe, ctr.LivenessProbe, ctr.ReadinessProbe
	if s.InitialDelaySeconds != 0 || s.PeriodSeconds != 1 || s.FailureThreshold != 250 || s.HTTPGet.Path != "/livez" {
		t.Errorf("startup probe %+v", s)
	}
	if l.InitialDelaySeconds != 10 || l.PeriodSeconds != 10 || l.FailureThreshold != 8 {
		t.Errorf("liveness probe %+v: kubeadm's", l)
	}
	if r.PeriodSeconds != 1 || r.FailureThreshold != 3 || r.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v: kubeadm's", r)
	}
}
