package operator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// lifecycleOperator runs the operator as a pod "steward-operator" of ns,
// watching ns only, serving its metrics on :8443 (plain HTTP), and returns
// a function that reads them: the metric samples by name.
func lifecycleOperator(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ns, image string) func() (map[string]float64, error) {
	t.Helper()
	root := harness.RepoRoot(t)
	operatorfixture.Kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy", "operator", "crd"))
	operatorfixture.Kubectl(t, c, "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.steward.etcd.io")
	operatorfixture.Kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy", "operator", "rbac", "role.yaml"))
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "steward-operator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := "steward-operator-" + ns
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "steward-operator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "steward-operator", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	grace := int64(5)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "steward-operator", Labels: map[string]string{"app": "steward-operator"}},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "steward-operator",
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "operator", Image: image, ImagePullPolicy: corev1.PullNever,
				Args: []string{"operator", "--state-dir", "/var/lib/steward-operator", "--namespace", ns,
					"--metrics-address", ":8443", "--health-address", ":8081",
					"--member-image", image, "--member-image-pull-policy", "Never"},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			operatorfixture.Logs(t, cs, ns, "steward-operator")
		}
	})
	var ip string
	harness.Eventually(t, 2*time.Minute, 500*time.Millisecond, "the operator's pod running", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "steward-operator", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		}
		ip = p.Status.PodIP
		return nil
	})
	netns := filepath.Join("/run/netns", c.Nodes[0].Netns)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return operatorfixture.DialInNetns(ctx, netns, addr)
		},
	}}
	t.Cleanup(hc.CloseIdleConnections)
	return func() (map[string]float64, error) {
		resp, err := hc.Get("http://" + net.JoinHostPort(ip, "8443") + "/metrics")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return nil, fmt.Errorf("metrics: %s: %s", resp.Status, b)
		}
		out := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			if !ok || strings.HasPrefix(name, "#") || !strings.HasPrefix(name, "steward_operator_") {
				continue
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				out[name] = f
			}
		}
		return out, sc.Err()
	}
}

// TestOperatorDeleteRecreate: deleting an EtcdCluster while its version
// plan runs stops what the operator ran for it, measured in the operator's
// metrics: its coordinator process (`certs renew --watch`, counted in the
// operator's /proc) and the plan's goroutine are gone, and no run is kept.
// A resource of the same name made again over the kept claim is refused
// (Ready False, reason StaleClaims, an Event naming the claim; no
// StatefulSet, no Secret made), finds no goroutine or coordinator of the
// old one, and, once the claim is deleted, starts empty with its own
// coordinator.
func TestOperatorDeleteRecreate(t *testing.T) { harness.ForEachLocalKube(t, operatorDeleteRecreate) }

func operatorDeleteRecreate(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 1 {
		t.Skip("needs a node")
	}
	_, vs := operatorfixture.StoreVersions(t)
	if len(vs) < 2 {
		t.Skipf("needs two minor lines in the store, has %v", vs)
	}
	from, to := vs[0], vs[1]
	image := operatorfixture.UpgradeImage(t, c)
	cs, cl := operatorfixture.Clients(t, c)
	ns := operatorfixture.Namespace(t, cs, "op-lifecycle")
	metrics := lifecycleOperator(t, c, cs, ns, image)
	ctx := t.Context()
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	newCluster := func() *v1alpha1.EtcdCluster {
		return &v1alpha1.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
			Spec:       v1alpha1.EtcdClusterSpec{Replicas: 1, Version: from},
		}
	}
	t.Cleanup(func() {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(context.Background(), key, &got); err == nil {
			if t.Failed() {
				t.Logf("status: %+v", got.Status)
			}
			_ = cl.Delete(context.Background(), &got)
		}
	})
	// want waits until the operator's metrics are what want says.
	wantMetrics := func(what string, timeout time.Duration, ok func(m map[string]float64) bool) map[string]float64 {
		t.Helper()
		var m map[string]float64
		harness.Eventually(t, timeout, 100*time.Millisecond, what, func() error {
			var err error
			if m, err = metrics(); err != nil {
				return err
			}
			if !ok(m) {
				return fmt.Errorf("metrics %v", m)
			}
			return nil
		})
		return m
	}
	const (
		coordinators = "steward_operator_coordinator_processes"
		goroutines   = "steward_operator_cluster_goroutines"
		runs         = "steward_operator_clusters"
	)
	ready := func(timeout time.Duration) *v1alpha1.EtcdCluster {
		t.Helper()
		var got v1alpha1.EtcdCluster
		harness.Eventually(t, timeout, time.Second, "db Ready with its member", func() error {
			if err := cl.Get(ctx, key, &got); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAllMembersReady) || len(got.Status.Members) != 1 {
				return fmt.Errorf("AllMembersReady %+v, members %+v (last operation %+v)",
					meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAllMembersReady), got.Status.Members, got.Status.LastOperation)
			}
			return nil
		})
		return &got
	}

	ec := newCluster()
	if err := cl.Create(ctx, ec); err != nil {
		t.Fatal(err)
	}
	first := ready(6 * time.Minute)
	wantMetrics("one coordinator process, one run", time.Minute, func(m map[string]float64) bool {
		return m[coordinators] == 1 && m[runs] == 1
	})

	// An upgrade starts (the plan's goroutine runs); the resource is
	// deleted under it.
	first.Spec.Version = to
	if err := cl.Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	wantMetrics("the version plan's goroutine running", 2*time.Minute, func(m map[string]float64) bool { return m[goroutines] >= 1 })
	if err := cl.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	m := wantMetrics("no coordinator, goroutine or run left of the deleted db", time.Minute, func(m map[string]float64) bool {
		return m[coordinators] == 0 && m[goroutines] == 0 && m[runs] == 0
	})
	t.Logf("after the deletion: %v", m)
	harness.Eventually(t, 3*time.Minute, time.Second, "db's pod gone", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: operator.Selector(ec)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-db-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("claim data-db-0 not kept: %v", err)
	}
	// Kubernetes' garbage collector removes what the old one owned.
	harness.Eventually(t, 2*time.Minute, time.Second, "db's StatefulSet and Secrets collected", func() error {
		for _, get := range []func() error{
			func() error { _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{}); return err },
			func() error { _, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-join", metav1.GetOptions{}); return err },
		} {
			if err := get(); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
		}
		return nil
	})

	// The same name again, over the kept claim: refused, nothing made.
	again := newCluster()
	if err := cl.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Minute, time.Second, "db refused over the old claim", func() error {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(ctx, key, &got); err != nil {
			return err
		}
		rc := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if rc == nil || rc.Status != metav1.ConditionFalse || rc.Reason != operator.ReasonStaleClaims || !strings.Contains(rc.Message, "data-db-0") {
			return fmt.Errorf("Ready %+v", rc)
		}
		vc := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDataVolumesReady)
		if vc == nil || vc.Reason != operator.ReasonStaleClaims {
			return fmt.Errorf("DataVolumesReady %+v", vc)
		}
		if _, ok := operatorfixture.Events(t, cs, ns, "db")[operator.ReasonStaleClaims]; !ok {
			return fmt.Errorf("no event %s yet", operator.ReasonStaleClaims)
		}
		return nil
	})
	if _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet was made over the old claim: %v", err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-join", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a join Secret was made over the old claim: %v", err)
	}
	if m, err := metrics(); err != nil || m[coordinators] != 0 || m[goroutines] != 0 {
		t.Errorf("the refused db found something running: %v %v", m, err)
	}

	// The claim deleted, as the condition says: it starts empty, with a
	// coordinator of its own.
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := ready(6 * time.Minute)
	if got.Status.Version != from {
		t.Errorf("status.version %q, want %q", got.Status.Version, from)
	}
	wantMetrics("the new db's coordinator", time.Minute, func(m map[string]float64) bool {
		return m[coordinators] == 1 && m[runs] == 1
	})
	if err := cl.Delete(ctx, got); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	wantMetrics("nothing left of the second db", time.Minute, func(m map[string]float64) bool {
		return m[coordinators] == 0 && m[goroutines] == 0 && m[runs] == 0
	})
	harness.Eventually(t, 3*time.Minute, time.Second, "the second db's pod gone", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: operator.Selector(again)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
	_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data-db-0", metav1.DeleteOptions{})
}
