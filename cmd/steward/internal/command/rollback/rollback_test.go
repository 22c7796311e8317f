package rollback

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// TestRollbackHint: the refusals of planning a rollback get this command's
// flags.
func TestRollbackHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refusal.New(upgrade.ErrOverridableChecks, "pre-flight checks failed"), "pre-flight checks failed; use --force to skip the checks marked overridable"},
		{refusal.New(upgrade.ErrNoOnlineDowngrade, "etcd 3.5 has no online downgrade to 3.4"), "etcd 3.5 has no online downgrade to 3.4; roll back with --strategy restore"},
	} {
		got := rollbackHint(tc.err)
		if got.Error() != tc.want {
			t.Errorf("rollbackHint = %q, want %q", got, tc.want)
		}
		if !errors.Is(got, errors.Unwrap(tc.err)) {
			t.Errorf("rollbackHint lost the chain: %v", got)
		}
		if strings.Contains(got.Error(), "plan resume") {
			t.Errorf("a refusal before the plan got the resume advice: %q", got)
		}
	}
}

// TestUndoFor: `steward rollback` rolls back a CA rotation when the
// latest plan is one that did not finish, or an unfinished rollback of one
// (whose refusals carotate words); anything else (no plan too) is left to
// upgrades. The registry (cluster.PlanKinds) says so from each kind's
// registration.
func TestUndoFor(t *testing.T) {
	for _, tc := range []struct {
		kind  plan.Kind
		state plan.State
		want  plan.Kind
	}{
		{plan.KindCARotation, plan.Aborted, plan.KindCARotationRollback},
		{plan.KindCARotation, plan.Failed, plan.KindCARotationRollback},
		{plan.KindCARotation, plan.Running, plan.KindCARotationRollback},
		{plan.KindCARotation, plan.Pending, plan.KindCARotationRollback},
		{plan.KindCARotation, plan.Done, plan.KindRollback},
		{plan.KindCARotation, plan.RolledBack, plan.KindRollback},
		{plan.KindCARotationRollback, plan.Failed, plan.KindCARotationRollback},
		{plan.KindCARotationRollback, plan.Running, plan.KindCARotationRollback},
		{plan.KindCARotationRollback, plan.Done, plan.KindRollback},
		{plan.KindCARotationRollback, plan.Aborted, plan.KindCARotationRollback},
		{plan.KindUpgrade, plan.Failed, plan.KindRollback},
		{plan.KindUpgrade, plan.Done, plan.KindRollback},
		{plan.KindRollback, plan.Aborted, plan.KindRollback},
		{plan.KindAdopt, plan.Failed, plan.KindRollback},
		{plan.KindAdoptUndo, plan.Done, plan.KindRollback},
		{plan.KindCertsTakeOver, plan.Failed, plan.KindRollback},
	} {
		k, err := cluster.PlanKinds.UndoFor(&plan.Plan{ID: "p", Kind: tc.kind, State: tc.state})
		if err != nil {
			t.Errorf("UndoFor(%s %s): %v", tc.kind, tc.state, err)
			continue
		}
		if k.Kind != tc.want {
			t.Errorf("UndoFor(%s %s) = %s, want %s", tc.kind, tc.state, k.Kind, tc.want)
		}
	}
	if k, err := cluster.PlanKinds.UndoFor(nil); err != nil || k.Kind != plan.KindRollback {
		t.Errorf("UndoFor(no plan) = %v, %v; want the rollback of the last upgrade", k, err)
	}
	_, err := cluster.PlanKinds.UndoFor(&plan.Plan{ID: "p", Kind: "no-such-kind", State: plan.Failed})
	if !errors.Is(err, plan.ErrUnknownKind) || !strings.Contains(err.Error(), "no-such-kind") {
		t.Errorf("UndoFor(unknown kind) = %v, want an error naming it", err)
	}
}

// TestRollbackRefusalAdvice: whichever kind the registry starts (an
// upgrade's rollback or a CA rotation's), its refusals name no command,
// and this command adds the advice the operator read before, letter for
// letter.
func TestRollbackRefusalAdvice(t *testing.T) {
	failed := func(k plan.Kind, id string) *plan.Plan { return &plan.Plan{ID: id, Kind: k, State: plan.Failed} }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"an open CA rotation, to an upgrade's rollback", plan.RefuseActive(failed(plan.KindCARotation, "ca-rotation-1")),
			"ca-rotation plan ca-rotation-1 is failed: `steward plan resume` finishes it, `steward plan abort` stops it"},
		{"an open rollback", &plan.ActiveError{Plan: failed(plan.KindRollback, "rollback-1"), Name: "rollback rollback-1"},
			"rollback rollback-1 is failed: `steward plan resume` finishes it"},
		{"no upgrade", upgrade.ErrNoUpgrade, "no upgrade plan to roll back: `steward plan show` lists the plans"},
		{"an upgrade's rollback under the runner's lock", plan.ErrLocked, plan.ErrLocked.Error()},
		{"a CA rotation's rollback under the runner's lock", carotate.ErrPlanRunning,
			"another steward process is running a plan in this Steward directory: `steward plan abort` stops it after its step, then `steward rollback` rolls a CA rotation back"},
		{"an open CA rotation rollback", carotate.RollbackOf(failed(plan.KindCARotationRollback, "r-1")),
			"CA rotation rollback r-1 is failed: `steward plan resume` finishes it"},
		{"a CA rotation done", carotate.RollbackOf(&plan.Plan{ID: "ca-rotation-1", Kind: plan.KindCARotation, State: plan.Done}),
			"the CA rotation is done (plan ca-rotation-1): its new CA is the CA; to change the CA again, run `steward certs rotate-ca`"},
	} {
		if strings.Contains(tc.err.Error(), "`steward ") {
			t.Errorf("%s: the library's refusal names a command: %q", tc.name, tc.err)
		}
		if got := rollbackHint(tc.err); got.Error() != tc.want {
			t.Errorf("%s: %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
