package operator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// TestOperatorDrain: the PodDisruptionBudget holds quorum through node
// drains. Under a writer and the linearizability checker through
// db-client, `kubectl drain` of a node evicts its member of a 3-member
// EtcdCluster; the member's pod comes back Pending (its volume is a local
// one of the drained node). While it is not Ready, `kubectl drain` of a
// second member's node is refused by the budget (drain gives up after its
// timeout, that member's pod untouched) and the writes go on. Both nodes
// uncordoned, every member is Ready again with the same member IDs (the
// evicted one kept its data), the budget allows one eviction again (a
// server-side dry run), and every acknowledged write is present with no
// linearizability violation. The operator's own node is never drained:
// its state volume is a local one too (docs/operator.md, Limits).
func TestOperatorDrain(t *testing.T) { harness.ForEachLocalKube(t, operatorDrain) }

func operatorDrain(t *testing.T, c *localkube.Cluster) {
	began := time.Now()
	const ns = "op-drain"
	cs, cl := operatorfixture.Setup(t, c, ns, operatorfixture.StewardImage(t, c))
	ec := operatorfixture.ScaleCluster(t, cs, cl, ns, 3)
	ids := operatorfixture.MemberIDs(operatorfixture.WaitMembers(t, cl, ec, 3, time.Minute))
	l := operatorfixture.StartLoad(t, "drain", operatorfixture.ServiceClient(t, c, cs, ec))

	// Two members on nodes other than the operator's.
	op, err := operatorfixture.OperatorPod(t, cs)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
	if err != nil {
		t.Fatal(err)
	}
	var members []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName != op.Spec.NodeName && !slices.ContainsFunc(members, func(m corev1.Pod) bool { return m.Spec.NodeName == p.Spec.NodeName }) {
			members = append(members, p)
		}
	}
	slices.SortFunc(members, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	if len(members) < 2 {
		t.Fatalf("members on nodes other than the operator's (%s): %d", op.Spec.NodeName, len(members))
	}
	first, second := members[0], members[1]
	t.Logf("operator on %s; draining %s (member %s), then %s (member %s)", op.Spec.NodeName, first.Spec.NodeName, first.Name, second.Spec.NodeName, second.Name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range []string{first.Spec.NodeName, second.Spec.NodeName} {
			_ = c.Kubectl(ctx, "uncordon", n).Run()
		}
	})
	drain := func(node, timeout string) (string, error) {
		out, err := c.Kubectl(t.Context(), "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout="+timeout).CombinedOutput()
		return string(out), err
	}

	// The first drain evicts its member; the pod comes back Pending.
	drained := time.Now()
	if out, err := drain(first.Spec.NodeName, "3m"); err != nil {
		t.Fatalf("drain %s: %v\n%s", first.Spec.NodeName, err, out)
	}
	t.Logf("drain %s: %s", first.Spec.NodeName, time.Since(drained).Round(100*time.Millisecond))
	down := func() error {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), first.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == first.UID {
			return fmt.Errorf("pod %s not evicted", first.Name)
		}
		if operatorfixture.PodReady(p) {
			return fmt.Errorf("pod %s Ready on %s while %s is cordoned", p.Name, p.Spec.NodeName, first.Spec.NodeName)
		}
		return nil
	}
	harness.Eventually(t, time.Minute, time.Second, first.Name+" evicted and not Ready", down)

	// The second drain, while the first member is not back: refused.
	refusedAt := time.Now()
	out, err := drain(second.Spec.NodeName, "30s")
	if err == nil {
		t.Fatalf("drain %s succeeded while %s was not Ready: the PodDisruptionBudget did not hold quorum\n%s", second.Spec.NodeName, first.Name, out)
	}
	if !strings.Contains(out, "disruption budget") {
		t.Errorf("drain %s failed, but not for the disruption budget: %v\n%s", second.Spec.NodeName, err, out)
	}
	t.Logf("drain %s refused after %s: %s", second.Spec.NodeName, time.Since(refusedAt).Round(100*time.Millisecond), operatorfixture.Tail(strings.TrimSpace(out), 2))
	if err := down(); err != nil {
		t.Fatalf("the second drain was not tried while %s was down: %v", first.Name, err)
	}
	if p, err := cs.CoreV1().Pods(ns).Get(t.Context(), second.Name, metav1.GetOptions{}); err != nil || p.UID != second.UID || p.DeletionTimestamp != nil {
		t.Fatalf("%s after the refused drain: %v (deleting %v)", second.Name, err, p.DeletionTimestamp)
	}
	l.GoesOn(t, "with one member drained and the second drain refused")

	// Uncordoned: every member back, with its data.
	operatorfixture.Kubectl(t, c, "uncordon", second.Spec.NodeName)
	operatorfixture.Kubectl(t, c, "uncordon", first.Spec.NodeName)
	back := time.Now()
	st := operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	t.Logf("benchmark: uncordoned -> AllMembersReady: %s (drained %s before)", time.Since(back).Round(100*time.Millisecond), back.Sub(drained).Round(time.Second))
	if got := operatorfixture.MemberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs after the drain: %v, want %v", got, ids)
	}
	// Now the budget lets one member go.
	harness.Eventually(t, time.Minute, time.Second, "an eviction of "+second.Name+" allowed (dry run)", func() error {
		return evictDryRun(t, cs, ns, second.Name)
	})
	l.GoesOn(t, "after the drain")
	l.Stop(t, "drain")
	t.Logf("TestOperatorDrain took %s", time.Since(began).Round(time.Second))
}

// evictDryRun asks the eviction API, as drain does, to evict the pod,
// with a server-side dry run: the budget is checked, nothing is deleted.
func evictDryRun(t *testing.T, cs *kubernetes.Clientset, ns, pod string) error {
	return cs.PolicyV1().Evictions(ns).Evict(t.Context(), &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
	})
}
