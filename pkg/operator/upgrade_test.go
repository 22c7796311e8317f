package operator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

func versionPlan(t *testing.T, kind plan.Kind, state plan.State, from, to string) *plan.Plan {
	t.Helper()
	p := &plan.Plan{ID: string(kind) + "-1", Kind: kind, State: state}
	if err := plan.SetPayload(p, upgrade.Payload{From: from, To: to, Strategy: upgrade.StrategyRolling}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecideVersion: the decision table of spec.version.
func TestDecideVersion(t *testing.T) {
	up := versionPlan(t, plan.KindUpgrade, plan.Done, "3.5.35", "3.7.3")
	upRunning := versionPlan(t, plan.KindUpgrade, plan.Running, "3.5.35", "3.7.3")
	upFailed := versionPlan(t, plan.KindUpgrade, plan.Failed, "3.5.35", "3.7.3")
	rbRunning := versionPlan(t, plan.KindRollback, plan.Running, "3.7.3", "3.5.35")
	other := &plan.Plan{ID: "ca-1", Kind: plan.KindCARotation, State: plan.Running}
	for _, tc := range []struct {
		name               string
		want, running      string
		latest, lastUp     *plan.Plan
		locked             bool
		action, to, planID string
		err                string
	}{
		{name: "no version asked", running: "3.5.35"},
		{name: "same version", want: "3.5.35", running: "3.5.35"},
		{name: "v prefix same", want: "v3.5.35", running: "3.5.35"},
		{name: "newer", want: "3.7.3", running: "3.5.35", action: VersionUpgrade, to: "3.7.3"},
		{name: "older without an upgrade is a downgrade plan", want: "3.5.35", running: "3.6.16", action: VersionUpgrade, to: "3.5.35"},
		{name: "back to the last upgrade's start", want: "3.5.35", running: "3.7.3", latest: up, lastUp: up, action: VersionRollback, to: "3.5.35"},
		{name: "back while the upgrade failed halfway", want: "3.5.35", running: "", latest: upFailed, lastUp: upFailed, action: VersionRollback, to: "3.5.35"},
		{name: "rolled back already", want: "3.5.35", running: "3.5.35", lastUp: up},
		{name: "interrupted upgrade resumes", want: "3.7.3", running: "", latest: upRunning, lastUp: upRunning, action: VersionResume, planID: upRunning.ID},
		{name: "interrupted rollback resumes whatever is asked", want: "3.7.3", latest: rbRunning, action: VersionResume, planID: rbRunning.ID},
		{name: "a running plan is waited for", want: "3.5.35", latest: upRunning, locked: true, action: VersionWait, planID: upRunning.ID},
		{name: "another kind's plan is left to its admission", want: "3.7.3", running: "3.5.35", latest: other, action: VersionUpgrade, to: "3.7.3"},
		{name: "mixed versions without a plan go to the planner", want: "3.7.3", running: "", action: VersionUpgrade, to: "3.7.3"},
		{name: "a failed upgrade to the version asked is reported, not planned again", want: "3.7.3", running: "", latest: upFailed, lastUp: upFailed},
		{name: "not a version", want: "latest", running: "3.5.35", err: `spec.version "latest"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := DecideVersion(tc.want, tc.running, tc.latest, tc.lastUp, tc.locked)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			id := ""
			if d.Plan != nil {
				id = d.Plan.ID
			}
			if d.Action != tc.action || d.To != tc.to || id != tc.planID {
				t.Errorf("got %+v (plan %q), want action %q to %q plan %q", d, id, tc.action, tc.to, tc.planID)
			}
		})
	}
}

func TestRunningVersion(t *testing.T) {
	st := &status.Status{Members: []status.MemberStatus{{Name: "a", Version: "3.6.16"}, {Name: "b", Version: "3.6.16"}}}
	if v := runningVersion(st); v != "3.6.16" {
		t.Errorf("uniform: %q", v)
	}
	st.Members[1].Version = "3.7.3"
	if v := runningVersion(st); v != "" {
		t.Errorf("mixed: %q", v)
	}
	st.Members[1].Version = ""
	if v := runningVersion(st); v != "" {
		t.Errorf("unknown: %q", v)
	}
}

// TestStatusRefusedVersion: a refused spec.version replaces the status's
// UpgradeInProgress with False, reason UpgradeRefused and the refusal.
func TestStatusRefusedVersion(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", Generation: 2}}
	st := &status.Status{Conditions: []status.Condition{{Type: v1alpha1.ConditionUpgradeInProgress, Status: "False", Reason: "NoPlan", Message: "no plan"}}}
	out := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: st, Upgrade: refusedCondition("3.9.0 is not in the catalogue")}, time.Now())
	c := meta.FindStatusCondition(out.Conditions, v1alpha1.ConditionUpgradeInProgress)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "UpgradeRefused" || c.Message != "3.9.0 is not in the catalogue" || c.ObservedGeneration != 2 {
		t.Errorf("UpgradeInProgress %+v", c)
	}
}

// TestStatusVersionMixed: status.version is empty while the members run
// different versions, and while one member's version is not known (a
// member restarting on its new version mid-upgrade; found by
// TestOperatorUpgradeRollback, which saw 3.6.16 reported with db-2 down).
func TestStatusVersionMixed(t *testing.T) {
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Spec: v1alpha1.EtcdClusterSpec{Replicas: 3}}
	for _, tc := range []struct {
		name     string
		versions []string
		want     string
	}{
		{"uniform", []string{"3.6.16", "3.6.16", "3.6.16"}, "3.6.16"},
		{"mixed", []string{"3.6.16", "3.7.3", "3.6.16"}, ""},
		{"one unknown", []string{"3.6.16", "3.6.16", ""}, ""},
	} {
		st := &status.Status{}
		for i, v := range tc.versions {
			st.Members = append(st.Members, status.MemberStatus{Name: PodName(ec, i), Version: v, Healthy: v != "", Role: "follower"})
		}
		out := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: st}, time.Now())
		if out.Version != tc.want {
			t.Errorf("%s: status.version %q, want %q", tc.name, out.Version, tc.want)
		}
		for i, m := range out.Members {
			if m.Version != tc.versions[i] {
				t.Errorf("%s: members[%d].version %q, want %q", tc.name, i, m.Version, tc.versions[i])
			}
		}
	}
}

// TestVersionPlanHolds: membership waits while a version plan runs or
// must be resumed (its goroutine, a Pending or Running upgrade or rollback
// record, the store's lock), and not for a failed or done plan, nor for a
// plan of another kind.
func TestVersionPlanHolds(t *testing.T) {
	p := func(k plan.Kind, s plan.State) *plan.Plan { return &plan.Plan{ID: "p1", Kind: k, State: s} }
	for _, tc := range []struct {
		name          string
		running       bool
		locked        bool
		latest        *plan.Plan
		want          bool
		wantSubstring string
	}{
		{name: "nothing", want: false},
		{name: "goroutine", running: true, want: true, wantSubstring: "the version plan (upgrade)"},
		{name: "upgrade running after a restart", latest: p(plan.KindUpgrade, plan.Running), want: true, wantSubstring: "upgrade plan p1"},
		{name: "rollback pending", latest: p(plan.KindRollback, plan.Pending), want: true, wantSubstring: "rollback plan p1"},
		{name: "store locked", locked: true, want: true, wantSubstring: "locked"},
		{name: "upgrade failed", latest: p(plan.KindUpgrade, plan.Failed), want: false},
		{name: "upgrade done", latest: p(plan.KindUpgrade, plan.Done), want: false},
		{name: "other kind running", latest: p(plan.KindAdopt, plan.Running), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			what, got := versionPlanHolds("upgrade", tc.running, tc.locked, tc.latest)
			if got != tc.want || !strings.Contains(what, tc.wantSubstring) {
				t.Fatalf("versionPlanHolds = %q, %v; want %v naming %q", what, got, tc.want, tc.wantSubstring)
			}
		})
	}
}

// TestVersionUnknown: a member that did not answer (no version) holds a
// version decision back; members that all answered, even with differing
// versions (a plan stopped half-way), do not.
func TestVersionUnknown(t *testing.T) {
	st := func(vs ...string) *status.Status {
		s := &status.Status{}
		for i, v := range vs {
			s.Members = append(s.Members, status.MemberStatus{Name: fmt.Sprint("db-", i), Version: v})
		}
		return s
	}
	if !versionUnknown(st("3.6.16", "", "3.6.16")) {
		t.Error("a member without a version: want unknown")
	}
	if versionUnknown(st("3.6.16", "3.7.3", "3.6.16")) || versionUnknown(st("3.6.16", "3.6.16", "3.6.16")) {
		t.Error("every member answered: want known")
	}
}
