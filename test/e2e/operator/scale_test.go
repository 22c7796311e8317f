package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
	"github.com/etcd-steward/steward/test/workload"
)

// TestOperatorScale: spec.replicas 3 -> 5 -> 3 -> 1 -> 3 (the last two by
// kubectl scale) under a writer and a linearizability check through the
// members' Service: each new member joins as a learner and is promoted,
// each leaving one (highest ordinal first) leaves etcd before its pod
// goes, its claim is kept; every acknowledged write is there.
func TestOperatorScale(t *testing.T) { harness.ForEachLocalKube(t, operatorScale) }

func operatorScale(t *testing.T, c *localkube.Cluster) {
	const ns = "op-scale"
	cs, cl := operatorfixture.Setup(t, c, ns, operatorfixture.StewardImage(t, c))
	ec := operatorfixture.ScaleCluster(t, cs, cl, ns, 3)
	l := operatorfixture.StartLoad(t, "scale", operatorfixture.ServiceClient(t, c, cs, ec))

	// The operator's usage at rest: 30 s of one ready cluster (a window
	// measured, not a wait for a state), then under the scaling below.
	use := operatorfixture.WatchUsage(t, cs)
	rest := time.Now()
	select {
	case <-t.Context().Done():
	case <-time.After(30 * time.Second):
	}
	t.Logf("benchmark: operator at rest (one 3-member cluster): %s", use.Between(rest, time.Now()))

	start := time.Now()
	operatorfixture.SetReplicas(t, c, cl, ec, 5, false)
	st := operatorfixture.WaitMembers(t, cl, ec, 5, 10*time.Minute)
	t.Logf("benchmark: scale 3 -> 5: %s", time.Since(start).Round(100*time.Millisecond))
	if op := st.LastOperation; op == nil || op.Type != "ScaleUp" || op.State != "Succeeded" {
		t.Errorf("last operation %+v", op)
	}
	before := operatorfixture.MemberIDs(st)

	operatorfixture.SetReplicas(t, c, cl, ec, 3, false)
	st = operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	for _, m := range st.Members {
		if m.Name == "db-3" || m.Name == "db-4" || before[m.Name] != m.ID {
			t.Errorf("after 5 -> 3: member %+v (before: %v)", m, before)
		}
	}
	operatorfixture.SetReplicas(t, c, cl, ec, 1, true)
	st = operatorfixture.WaitMembers(t, cl, ec, 1, 5*time.Minute)
	if st.Members[0].Name != "db-0" || st.Members[0].ID != before["db-0"] {
		t.Errorf("after 3 -> 1: %+v", st.Members)
	}
	operatorfixture.SetReplicas(t, c, cl, ec, 3, true)
	operatorfixture.WaitMembers(t, cl, ec, 3, 10*time.Minute)
	t.Logf("benchmark: operator under churn (3 -> 5 -> 3 -> 1 -> 3): %s", use.Between(start, time.Now()))
	l.GoesOn(t, "after 1 -> 3")
	l.Stop(t, "scale 3 -> 5 -> 3 -> 1 -> 3")

	// The claims of the members that left are kept.
	for i := range 5 {
		claim := fmt.Sprintf("data-db-%d", i)
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{}); err != nil {
			t.Errorf("claim %s: %v", claim, err)
		}
	}
	operatorfixture.RequireEvents(t, cs, ns, "db", "HostAdded", "MemberAdded", "MemberRemoved", "PodRemoved")
}

// TestOperatorMemberLoss: under a writer, the leader's pod deleted comes
// back with its data and the same member ID; a member whose claim and pod
// are deleted comes back empty and is rebuilt as a new member (a new ID);
// hibernation (replicas 0) stops every member and keeps the claims, and a
// wake brings back the same member IDs and every acknowledged write, also
// when every file of the volumes was made root's meanwhile (as root pods of
// an operator from before the non-root pods left them): the init
// containers make them the members' again.
func TestOperatorMemberLoss(t *testing.T) {
	t.Parallel() // beside the other tests of setupShared
	harness.ForEachLocalKube(t, operatorMemberLoss)
}

func operatorMemberLoss(t *testing.T, c *localkube.Cluster) {
	const ns = "op-loss"
	cs, cl := operatorfixture.SetupShared(t, c, ns, operatorfixture.StewardImage(t, c))
	ec := operatorfixture.ScaleCluster(t, cs, cl, ns, 3)
	st := operatorfixture.WaitMembers(t, cl, ec, 3, time.Minute)
	ids := operatorfixture.MemberIDs(st)
	cli := operatorfixture.ServiceClient(t, c, cs, ec)
	l := operatorfixture.StartLoad(t, "loss", cli)

	// The leader's pod.
	leader := st.Leader
	start := time.Now()
	operatorfixture.DeletePod(t, cs, ns, leader)
	st = operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	t.Logf("benchmark: a member pod deleted -> AllMembersReady: %s", time.Since(start).Round(100*time.Millisecond))
	if got := operatorfixture.MemberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs after the leader's pod came back: %v, want %v", got, ids)
	}

	// A member's volume and pod: it comes back empty and is rebuilt.
	lost := "db-1"
	claim := "data-" + lost
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), lost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 8*time.Minute, 2*time.Second, lost+" rebuilt as a new member", func() error {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		now := operatorfixture.MemberIDs(got.Status)
		if now[lost] == "" || now[lost] == ids[lost] || got.Status.ReadyReplicas != 3 ||
			!meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAllMembersReady) {
			return fmt.Errorf("members %+v (last operation %+v)", got.Status.Members, got.Status.LastOperation)
		}
		if op := got.Status.LastOperation; op == nil || op.Type != "Replace" || op.State != "Succeeded" {
			return fmt.Errorf("last operation %+v", op)
		}
		return nil
	})
	l.GoesOn(t, "after the rebuild")
	res := l.Stop(t, "leader pod deleted, member volume lost")
	st = operatorfixture.WaitMembers(t, cl, ec, 3, time.Minute)
	ids = operatorfixture.MemberIDs(st)

	// Hibernate: no pod, the claims kept, status Hibernated.
	operatorfixture.SetReplicas(t, c, cl, ec, 0, false)
	harness.Eventually(t, 3*time.Minute, time.Second, "hibernated", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, operator.ConditionScaled); c == nil || c.Reason != "Hibernated" {
			return fmt.Errorf("Scaled %+v", c)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != "Hibernated" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	for i := range 3 {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), fmt.Sprintf("data-db-%d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("claim of db-%d: %v", i, err)
		}
	}

	// The volumes as an operator from before the non-root member pods
	// left them: every file root's (its pods ran as root). The wake's init
	// containers make them the members' user again, once.
	member := fmt.Sprintf("%d:%d", operator.MemberUID, operator.MemberGID)
	for i := range 3 {
		dir := volumeDir(t, cs, ns, fmt.Sprintf("data-db-%d", i))
		t.Logf("volume of db-%d: %d entries made root's (%s)", i, chownTree(t, dir, 0, 0), dir)
	}

	// Wake: the same members, every acknowledged write.
	operatorfixture.SetReplicas(t, c, cl, ec, 3, false)
	st = operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	if got := operatorfixture.MemberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs after the wake: %v, want %v", got, ids)
	}
	for i := range 3 {
		if got := owners(t, volumeDir(t, cs, ns, fmt.Sprintf("data-db-%d", i))); len(got) != 1 || got[member] == 0 {
			t.Errorf("after the wake the volume of db-%d holds entries of owners %v, want %s alone", i, got, member)
		}
	}
	requireNonRoot(t, cs, ns, operator.Selector(ec), 2)
	harness.Eventually(t, time.Minute, time.Second, "the writes after the wake", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "loss/probe")
		return err
	})
	workload.RequireKeys(t, cli, res)
}
