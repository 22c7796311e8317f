package localkube_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
)

// TestStatefulSetSpreadAndPDB (three nodes): a StatefulSet of three with a
// volume each (the default StorageClass) lands one pod per zone; with a
// PodDisruptionBudget allowing one pod down, `kubectl drain` of a first
// node evicts its pod, and a drain of a second node is refused by the
// budget while the first pod cannot come back (its volume is pinned to the
// cordoned node).
func TestStatefulSetSpreadAndPDB(t *testing.T) { harness.ForEachLocalKube(t, statefulSetSpreadAndPDB) }

func statefulSetSpreadAndPDB(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes: STEWARD_TEST_KUBE_NODES=3")
	}
	img := probeImage(t, c)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cs, "spread")
	labels := map[string]string{"app": "db"}
	replicas := int32(3)
	grace := int64(1)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "db", PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{Name: "db", Image: img, ImagePullPolicy: corev1.PullNever, Args: []string{"serve", ":8080"},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: []corev1.ServicePort{{Port: 8080}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	maxUnavailable := intstr.FromInt(1)
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	for _, n := range c.Nodes {
		zoneOf[n.Name] = n.Zone
	}
	nodeOf := map[string]string{} // pod -> node
	harness.Eventually(t, 3*time.Minute, 500*time.Millisecond, "StatefulSet db: 3 pods ready, one per zone", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=db"})
		if err != nil {
			return err
		}
		zones := map[string]bool{}
		for _, p := range pods.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("pod %s not ready: %s %v", p.Name, p.Status.Phase, p.Status.Conditions)
			}
			zones[zoneOf[p.Spec.NodeName]] = true
			nodeOf[p.Name] = p.Spec.NodeName
		}
		if len(pods.Items) != 3 || len(zones) != 3 {
			return fmt.Errorf("%d pods in zones %v", len(pods.Items), zones)
		}
		return nil
	})
	harness.Eventually(t, time.Minute, 500*time.Millisecond, "PDB db allows one disruption", func() error {
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(t.Context(), "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pdb.Status.DisruptionsAllowed != 1 {
			return fmt.Errorf("disruptions allowed %d", pdb.Status.DisruptionsAllowed)
		}
		return nil
	})
	first, second := nodeOf["db-0"], nodeOf["db-1"]
	t.Cleanup(func() {
		for _, n := range []string{first, second} {
			_ = c.Kubectl(t.Context(), "uncordon", n).Run()
		}
	})
	kubectl(t, c, "drain", first, "--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector=app=db", "--timeout=60s")
	out, err := c.Kubectl(t.Context(), "drain", second, "--ignore-daemonsets", "--pod-selector=app=db", "--timeout=10s").CombinedOutput()
	if err == nil {
		t.Fatalf("drain of a second node %s passed the PodDisruptionBudget: %s", second, out)
	}
	if !strings.Contains(string(out), "disruption budget") {
		t.Errorf("drain of %s failed, but not for the budget: %s", second, out)
	}
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "db-1", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil || p.Spec.NodeName != second {
		t.Errorf("db-1 on %s: evicted despite the budget (%v)", second, err)
	}
}
