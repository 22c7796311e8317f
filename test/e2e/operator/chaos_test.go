package operator_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// milestone is a point inside an operation in flight, seen from outside
// (the status, the pods): reached reports whether it has passed. The
// milestones of a step come in the order the operation passes them, and
// once passed stay passed, so polling cannot miss one; none is the
// operation's end (the status reports a member added or removed only once
// the step is done, so those are not milestones).
type milestone struct {
	name    string
	reached func() (bool, error)
}

// TestOperatorChaos: the operator's pod is killed (grace period 0: SIGKILL,
// its leader Lease not released) once inside each operation of a sequence
// (create 3, scale 3 -> 5, 5 -> 3, a member pod deleted, an upgrade of one
// minor version when the store has two), at a milestone of that operation
// chosen by a seeded random (the seed is logged; STEWARD_TEST_CHAOS_SEED
// repeats a run's choices). The Deployment's next pod takes the Lease and
// finishes every operation, under a writer and the linearizability
// checker's clients through db-client: every acknowledged write present, no
// violation; the final status matches the spec (3 ready members with the
// IDs of those that stayed, the version, the generation observed, no
// operation running).
func TestOperatorChaos(t *testing.T) { harness.ForEachLocalKube(t, operatorChaos) }

func operatorChaos(t *testing.T, c *localkube.Cluster) {
	began := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STEWARD_TEST_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("STEWARD_TEST_CHAOS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("chaos seed %d (STEWARD_TEST_CHAOS_SEED=%d repeats the kill points)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	image, from, to := "", "", ""
	if _, vs := operatorfixture.StoreVersions(t); len(vs) >= 2 {
		image, from, to = operatorfixture.UpgradeImage(t, c), vs[len(vs)-2], vs[len(vs)-1]
	} else {
		image = operatorfixture.StewardImage(t, c)
		t.Logf("no upgrade: the store has %v", vs)
	}
	const ns = "op-chaos"
	cs, cl := operatorfixture.Setup(t, c, ns, image)
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Version: from}}

	get := func() (*v1alpha1.EtcdCluster, error) {
		var got v1alpha1.EtcdCluster
		return &got, cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got)
	}
	member := func(name string) func() (bool, error) { // name is in members[]
		return func() (bool, error) {
			got, err := get()
			if err != nil {
				return false, err
			}
			_, ok := operatorfixture.MemberIDs(got.Status)[name]
			return ok, nil
		}
	}
	not := func(f func() (bool, error)) func() (bool, error) {
		return func() (bool, error) { ok, err := f(); return !ok && err == nil, err }
	}
	pod := func(name string, ready bool) func() (bool, error) { // the pod exists (and is Ready)
		return func() (bool, error) {
			p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return !ready || operatorfixture.PodReady(p), nil
		}
	}
	now := milestone{"at once", func() (bool, error) { return true, nil }}

	// chaos kills the operator's pod at one of the step's milestones,
	// chosen by rng, then waits for the step's end (done).
	kills := 0
	chaos := func(step string, ms []milestone, done func()) {
		t.Helper()
		m := ms[rng.IntN(len(ms))]
		start := time.Now()
		harness.Eventually(t, 8*time.Minute, 200*time.Millisecond, step+": "+m.name, func() error {
			ok, err := m.reached()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		var op *v1alpha1.Operation
		if got, err := get(); err == nil {
			op = got.Status.LastOperation
		}
		into := time.Since(start)
		old := operatorfixture.KillOperator(t, cs)
		kills++
		t.Logf("%s: killed the operator's pod %s at %q, %s into the step (last operation then: %+v); its next pod Ready %s later", step, old.Name, m.name,
			into.Round(100*time.Millisecond), op, (time.Since(start) - into).Round(100*time.Millisecond))
		done()
		t.Logf("%s: done %s after the edit", step, time.Since(start).Round(100*time.Millisecond))
	}

	// Create 3.
	operatorfixture.CreateClusters(t, cs, cl, ec)
	chaos("create 3", []milestone{now, {"three pods", func() (bool, error) {
		for i := range 3 {
			if ok, _ := pod(fmt.Sprintf("db-%d", i), false)(); !ok {
				return false, nil
			}
		}
		return true, nil
	}}, {"a member pod Ready", func() (bool, error) {
		for i := range 3 {
			if ok, _ := pod(fmt.Sprintf("db-%d", i), true)(); ok {
				return true, nil
			}
		}
		return false, nil
	}}}, func() { operatorfixture.WaitMembers(t, cl, ec, 3, 8*time.Minute) })
	st := operatorfixture.WaitMembers(t, cl, ec, 3, time.Minute)
	ids := operatorfixture.MemberIDs(st)
	l := operatorfixture.StartLoad(t, "chaos", operatorfixture.ServiceClient(t, c, cs, ec))

	// Scale 3 -> 5 -> 3.
	operatorfixture.SetReplicas(t, c, cl, ec, 5, false)
	chaos("scale 3 -> 5", []milestone{now, {"pod db-3", pod("db-3", false)}, {"member db-3", member("db-3")},
		{"pod db-4", pod("db-4", false)}}, func() { operatorfixture.WaitMembers(t, cl, ec, 5, 10*time.Minute) })
	operatorfixture.SetReplicas(t, c, cl, ec, 3, false)
	chaos("scale 5 -> 3", []milestone{now, {"member db-4 gone", not(member("db-4"))}, {"pod db-4 gone", not(pod("db-4", false))}},
		func() { operatorfixture.WaitMembers(t, cl, ec, 3, 10*time.Minute) })

	// A member's pod deleted: back with its data.
	victim := fmt.Sprintf("db-%d", rng.IntN(3))
	p, err := cs.CoreV1().Pods(ns).Get(t.Context(), victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	recreated := func() (bool, error) {
		q, err := cs.CoreV1().Pods(ns).Get(t.Context(), victim, metav1.GetOptions{})
		return err == nil && q.UID != p.UID, nil
	}
	chaos("pod "+victim+" deleted", []milestone{now, {"pod recreated", recreated}, {"pod recreated and Ready", func() (bool, error) {
		ok, _ := recreated()
		ready, _ := pod(victim, true)()
		return ok && ready, nil
	}}}, func() {
		harness.Eventually(t, 3*time.Minute, time.Second, victim+" recreated", func() error {
			if ok, _ := recreated(); !ok {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	})

	// The upgrade of one minor version.
	if to != "" {
		operatorfixture.SetVersion(t, cl, ec, to)
		onTo := func(n int) func() (bool, error) {
			return func() (bool, error) {
				got, err := get()
				if err != nil {
					return false, err
				}
				k := 0
				for _, m := range got.Status.Members {
					if m.Version == to {
						k++
					}
				}
				return k >= n, nil
			}
		}
		chaos("upgrade "+from+" -> "+to, []milestone{now, {"one member on " + to, onTo(1)}, {"two members on " + to, onTo(2)}}, func() {
			harness.Eventually(t, 12*time.Minute, 2*time.Second, "every member on "+to, func() error {
				got, err := get()
				if err != nil {
					return err
				}
				if up := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionUpgradeInProgress); up == nil || up.Status != metav1.ConditionFalse {
					return fmt.Errorf("UpgradeInProgress %+v", up)
				}
				if got.Status.Version != to {
					return fmt.Errorf("version %q, members %+v", got.Status.Version, got.Status.Members)
				}
				return nil
			})
		})
	}

	// The final status is the spec's.
	st = operatorfixture.WaitMembers(t, cl, ec, 3, 5*time.Minute)
	if got := operatorfixture.MemberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs at the end: %v, want those of the start %v", got, ids)
	}
	if to != "" && st.Version != to {
		t.Errorf("status.version %q, spec %q", st.Version, to)
	}
	if op := st.LastOperation; op == nil || op.State != "Succeeded" {
		t.Errorf("last operation at the end: %+v", op)
	}
	for _, m := range st.Members {
		if !m.Ready || (to != "" && m.Version != to) {
			t.Errorf("member at the end: %+v", m)
		}
	}
	l.GoesOn(t, "after the last kill")
	l.Stop(t, "operator killed in every operation")
	t.Logf("TestOperatorChaos: %d kills, took %s (seed %d)", kills, time.Since(began).Round(time.Second), seed)
}
