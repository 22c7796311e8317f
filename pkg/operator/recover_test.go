package operator

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// TestRecoveryChanges: what the automatic recovery records becomes each
// Event once, and the operation Recover.
func TestRecoveryChanges(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	reasons := func(ch recoveryEvents) string {
		var out []string
		for _, e := range ch.events {
			out = append(out, e.reason)
		}
		return strings.Join(out, ",")
	}
	if ch, seen := recoveryChanges(nil, recoverySeen{}); len(ch.events) != 0 || ch.op != nil || seen != (recoverySeen{}) {
		t.Errorf("nothing recorded: %+v %+v", ch, seen)
	}
	if ch, _ := recoveryChanges(&status.AutoRecoveryState{Decision: "none", Reason: "the cluster is quorate"}, recoverySeen{}); len(ch.events) != 0 || ch.op != nil {
		t.Errorf("quorate: %+v", ch)
	}

	wait := &status.AutoRecoveryState{Decision: "wait", Reason: "quorum lost everywhere; acting after the grace period", LostSince: t0}
	ch, seen := recoveryChanges(wait, recoverySeen{})
	if reasons(ch) != "QuorumLost" || ch.op != nil || !strings.Contains(ch.events[0].msg, "grace period") {
		t.Errorf("quorum lost: %+v", ch)
	}
	if ch, _ := recoveryChanges(wait, seen); len(ch.events) != 0 {
		t.Errorf("the same loss reported twice: %+v", ch)
	}

	running := *wait
	running.Decision = "act"
	running.LastAction = &status.AutoRecoveryAction{Action: "recover", Reason: "quorum lost everywhere: 2 of 3", Started: t0.Add(time.Minute), Result: "running"}
	ch, seen = recoveryChanges(&running, seen)
	if reasons(ch) != "Recovering" || ch.op == nil || ch.op.state != "Running" || !strings.Contains(ch.op.desc, "2 of 3") {
		t.Errorf("running: %+v %+v", ch, ch.op)
	}

	done := running
	done.LastAction = &status.AutoRecoveryAction{Action: "restore", Reason: "quorum lost everywhere: 2 of 3", Started: t0.Add(time.Minute), Result: "success", Message: "restored from full-1"}
	done.Actions = []status.AutoRecoveryCount{{Action: "restore", Result: "success", Count: 1}}
	ch, seen = recoveryChanges(&done, seen)
	if reasons(ch) != "Recovered" || ch.op == nil || ch.op.state != "Succeeded" ||
		!strings.Contains(ch.op.desc, "restored from full-1") || !strings.Contains(ch.op.desc, "restore success 1") {
		t.Errorf("done: %+v %+v", ch, ch.op)
	}
	if ch, _ := recoveryChanges(&done, seen); len(ch.events) != 0 || ch.op != nil {
		t.Errorf("the same action reported twice: %+v", ch)
	}

	failed := done
	failed.LastAction = &status.AutoRecoveryAction{Action: "restore", Started: t0.Add(3 * time.Minute), Result: "failure", Error: "no backup"}
	if ch, _ := recoveryChanges(&failed, seen); reasons(ch) != "RecoveryFailed" || ch.op == nil || ch.op.state != "Failed" || !strings.Contains(ch.op.desc, "no backup") {
		t.Errorf("failed: %+v", ch)
	}
	waited := done
	waited.LastAction = &status.AutoRecoveryAction{Action: "none", Started: t0.Add(3 * time.Minute), Result: "waited", Error: "not proven"}
	if ch, _ := recoveryChanges(&waited, seen); reasons(ch) != "RecoveryWaited" || ch.op != nil {
		t.Errorf("waited: %+v", ch)
	}
}

// TestStatusFromManualQuorumLost: in mode manual the Ready condition of a
// cluster that lost quorum says what to run.
func TestStatusFromManualQuorumLost(t *testing.T) {
	ec := testCluster()
	st := threeMembers()
	st.Cluster.Quorate = false
	st.Conditions[0] = status.Condition{Type: "Ready", Status: "False", Reason: "QuorumLost", Message: "no linearizable read succeeded"}
	dir := "/var/lib/steward-operator/ns/db"
	out := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: st, QuorumLostAdvice: ManualRecoveryAdvice(dir)}, time.Now())
	c := meta.FindStatusCondition(out.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Reason != "QuorumLost" || !strings.Contains(c.Message, "recover --dir "+dir) {
		t.Errorf("Ready %+v", c)
	}
	// Quorate: no advice.
	out = StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: threeMembers(), QuorumLostAdvice: ManualRecoveryAdvice(dir)}, time.Now())
	if c := meta.FindStatusCondition(out.Conditions, v1alpha1.ConditionReady); strings.Contains(c.Message, "recover --dir") {
		t.Errorf("Ready of a quorate cluster %+v", c)
	}
}

// TestShapeRecoveryDefault: the API's default recovery mode is auto (the
// hosts' spec's is manual).
func TestShapeRecoveryDefault(t *testing.T) {
	ec := testCluster()
	ec.Spec.Recovery = v1alpha1.Recovery{}
	s := &spec.Cluster{}
	Shape(s, ec)
	if s.Recovery.Mode != "auto" {
		t.Errorf("recovery mode %q, want auto", s.Recovery.Mode)
	}
	ec.Spec.Recovery = v1alpha1.Recovery{Mode: "manual", GracePeriodSeconds: 30}
	Shape(s, ec)
	if s.Recovery.Mode != "manual" || s.Recovery.GracePeriodSeconds != 30 {
		t.Errorf("recovery %+v", s.Recovery)
	}
}
