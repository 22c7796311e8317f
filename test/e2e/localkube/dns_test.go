package localkube_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
)

// TestStatefulSetPeerDNS: what the operator of issue 29 needs of the
// cluster DNS. The pods of a StatefulSet under a headless Service with
// publishNotReadyAddresses resolve each other by POD.SERVICE.NS.svc.
// cluster.local to their pod IPs before they are Ready (their readiness
// probe never passes here, as an etcd member's does not before it joined);
// a deleted pod comes back with a new IP and its name follows it.
func TestStatefulSetPeerDNS(t *testing.T) { harness.ForEachLocalKube(t, statefulSetPeerDNS) }

func statefulSetPeerDNS(t *testing.T, c *localkube.Cluster) {
	img := probeImage(t, c)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cs, "peers")
	labels := map[string]string{"app": "member"}
	replicas := int32(2)
	grace := int64(1)
	if _, err := cs.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "member-peer"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{Name: "peer", Port: 2380}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	never := &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
		Command: []string{"/kubeprobe", "get", "http://127.0.0.1:1/"}}}}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "member"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "member-peer", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{Name: "member", Image: img, ImagePullPolicy: corev1.PullNever,
						Args: []string{"sleep"}, ReadinessProbe: never}},
				},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := func(pod string) string { return pod + ".member-peer." + ns + ".svc.cluster.local" }
	// podIP waits for pod to run, not Ready, with an IP other than not.
	podIP := func(pod, not string) string {
		var ip string
		harness.Eventually(t, 2*time.Minute, 200*time.Millisecond, "pod "+pod+" running with a new IP", func() error {
			p, err := cs.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Status.PodIP == not || p.DeletionTimestamp != nil {
				return fmt.Errorf("phase %s, IP %q (the old one: %q)", p.Status.Phase, p.Status.PodIP, not)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					t.Fatalf("pod %s is Ready: its probe should never pass", pod)
				}
			}
			ip = p.Status.PodIP
			return nil
		})
		return ip
	}
	// resolves waits until from resolves the name of pod to ip.
	resolves := func(from, pod, ip string) {
		harness.Eventually(t, time.Minute, 300*time.Millisecond, name(pod)+" from "+from+" is "+ip, func() error {
			out, err := c.Kubectl(t.Context(), "exec", "-n", ns, from, "--", "/kubeprobe", "resolve", name(pod)).CombinedOutput()
			if err != nil || string(out) != ip+"\n" {
				return fmt.Errorf("%v: %q", err, out)
			}
			return nil
		})
	}
	ip0, ip1 := podIP("member-0", ""), podIP("member-1", "")
	resolves("member-1", "member-0", ip0)
	resolves("member-0", "member-1", ip1)

	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "member-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newIP := podIP("member-0", ip0)
	resolves("member-1", "member-0", newIP)
}
