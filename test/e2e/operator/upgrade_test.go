package operator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
	"github.com/etcd-steward/steward/test/workload"
)

// TestOperatorUpgradeRollback: spec.version takes a 3-member EtcdCluster
// made at the newest 3.5 of the store to the newest 3.7 (one plan, through
// the newest 3.6, member by member, the leader last), with the operator's
// pod killed once mid-upgrade (the Deployment's next pod resumes the plan), then
// back to 3.5 (the rollback: etcd's online downgrade), under a writer and
// the linearizability checker's clients through a Service: every
// acknowledged write present, no violation. A version the catalogue does
// not know first is refused with UpgradeInProgress=False and nothing
// changed. status.version, members[].version, lastOperation and the
// plans' Events are checked on the way.
func TestOperatorUpgradeRollback(t *testing.T) { harness.ForEachLocalKube(t, operatorUpgradeRollback) }

func operatorUpgradeRollback(t *testing.T, c *localkube.Cluster) {
	_, vs := operatorfixture.StoreVersions(t)
	if len(vs) < 3 {
		t.Skipf("needs three minor lines in the store, has %v", vs)
	}
	from, via, to := vs[0], vs[1], vs[2]
	const ns = "op-upgrade"
	cs, cl := operatorfixture.Setup(t, c, ns, operatorfixture.UpgradeImage(t, c))

	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: 3, Version: from},
	}
	operatorfixture.CreateClusters(t, cs, cl, ec)
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	// checkMixed: whenever the members run different versions,
	// status.version must be empty. get reads the resource and checks it.
	mixedSeen := 0
	checkMixed := func(got *v1alpha1.EtcdCluster) {
		versions := map[string]bool{}
		for _, m := range got.Status.Members {
			versions[m.Version] = true
		}
		if len(versions) > 1 {
			mixedSeen++
			if got.Status.Version != "" {
				t.Errorf("status.version %q while the members run %v", got.Status.Version, got.Status.Members)
			}
		}
	}
	get := func() (*v1alpha1.EtcdCluster, error) {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), key, &got); err != nil {
			return nil, err
		}
		checkMixed(&got)
		return &got, nil
	}
	// settled waits for every member Ready on version v, no plan left.
	settled := func(timeout time.Duration, v string) *v1alpha1.EtcdCluster {
		return operatorfixture.WaitVersion(t, cl, ec, 3, v, timeout, checkMixed)
	}
	settled(8*time.Minute, from)

	// A version the catalogue does not know: refused, nothing changed.
	operatorfixture.SetVersion(t, cl, ec, "3.99.0")
	harness.Eventually(t, time.Minute, time.Second, "3.99.0 refused", func() error {
		got, err := get()
		if err != nil {
			return err
		}
		up := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionUpgradeInProgress)
		if up == nil || up.Status != metav1.ConditionFalse || up.Reason != "UpgradeRefused" || up.ObservedGeneration != got.Generation {
			return fmt.Errorf("UpgradeInProgress %+v", up)
		}
		if !strings.Contains(up.Message, "3.99.0") {
			return fmt.Errorf("message does not name the version: %q", up.Message)
		}
		return nil
	})
	if got := settled(time.Minute, from); got.Status.Version != from {
		t.Fatalf("version changed by a refused spec.version: %+v", got.Status)
	}

	clis := operatorfixture.ServiceClients(t, c, cs, ec, 5)
	w := workload.Start(t, clis[0], workload.Options{Prefix: "/e2e/upgrade-writer", Interval: 10 * time.Millisecond})
	kvs := []clientv3.KV{clis[1], clis[2], clis[3], clis[4]}
	var reports []workload.PhaseReport
	phase := func(name string, do func()) {
		lc := workload.StartLinearizable(t, kvs, workload.LinOptions{Prefix: "/e2e/lin/" + strings.ReplaceAll(name, " ", "-"), Interval: 25 * time.Millisecond})
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to run", func() error {
			if n := lc.Count(); n < 50 {
				return fmt.Errorf("%d operations returned", n)
			}
			return nil
		})
		start := time.Now()
		do()
		took := time.Since(start)
		after := lc.Count()
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to go on after "+name, func() error {
			if n := lc.Count(); n < after+50 {
				return fmt.Errorf("%d operations returned since", n-after)
			}
			return nil
		})
		res := lc.Stop()
		reports = append(reports, workload.PhaseReport{Name: name, Took: took, Result: res})
		workload.RequireLinearizable(t, name, res)
	}

	phase("upgrade "+from+" to "+to, func() {
		operatorfixture.SetVersion(t, cl, ec, to)
		// Mid-upgrade (the plan saved and running), the operator's pod
		// is deleted and made again.
		harness.Eventually(t, 5*time.Minute, 500*time.Millisecond, "the upgrade plan running", func() error {
			got, err := get()
			if err != nil {
				return err
			}
			if op := got.Status.LastOperation; op == nil || op.Type != "Upgrade" || op.State != "Running" || op.Plan == "" {
				return fmt.Errorf("last operation %+v", op)
			}
			return nil
		})
		t.Logf("killing the operator's pod mid-upgrade")
		operatorfixture.KillOperator(t, cs)
		got := settled(12*time.Minute, to)
		if op := got.Status.LastOperation; op == nil || op.Type != "Upgrade" || op.State != "Succeeded" || !strings.HasPrefix(op.Plan, "upgrade-") || !strings.Contains(op.Description, op.Plan) {
			t.Errorf("last operation after the upgrade: %+v", op)
		}
	})
	phase("rollback to "+from, func() {
		operatorfixture.SetVersion(t, cl, ec, from)
		got := settled(12*time.Minute, from)
		if op := got.Status.LastOperation; op == nil || op.Type != "Rollback" || op.State != "Succeeded" || !strings.HasPrefix(op.Plan, "rollback-") || !strings.Contains(op.Description, op.Plan) {
			t.Errorf("last operation after the rollback: %+v", op)
		}
	})
	if mixedSeen == 0 {
		t.Logf("the status was never read while the members ran different versions")
	}
	res := w.Stop()
	workload.RequireKeys(t, clis[0], res)
	var longestAck time.Duration
	for _, l := range res.Latencies() {
		longestAck = max(longestAck, l)
	}
	t.Logf("writer through the upgrade %s -> %s -> %s (operator pod deleted once) and the rollback: %d acknowledged, %d failed writes, %d failed attempts %v, longest acknowledged write %s, longest gap between acknowledgements %s",
		from, via, to, len(res.Acked), len(res.Failed), res.FailedAttempts, res.AttemptErrors, longestAck, res.LongestGap())
	t.Logf("linearizability clients by phase:\n%s", workload.FormatReports(reports))

	operatorfixture.RequireEvents(t, cs, ns, "db", "UpgradeRefused", "PlanStep", "PlanResumed", "PlanDone")
}
