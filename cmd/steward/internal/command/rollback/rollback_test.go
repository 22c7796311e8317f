package rollback

import (
	"errors"
	"strings"
	"testing"

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

// TestCARollback: `steward rollback` rolls back a CA rotation when the
// latest plan is one that did not finish, or an unfinished rollback of one
// (whose refusals carotate words); anything else is left to upgrades.
func TestCARollback(t *testing.T) {
	for _, tc := range []struct {
		kind  plan.Kind
		state plan.State
		want  bool
	}{
		{plan.KindCARotation, plan.Aborted, true},
		{plan.KindCARotation, plan.Failed, true},
		{plan.KindCARotation, plan.Running, true},
		{plan.KindCARotation, plan.Pending, true},
		{plan.KindCARotation, plan.Done, false},
		{plan.KindCARotation, plan.RolledBack, false},
		{plan.KindCARotationRollback, plan.Failed, true},
		{plan.KindCARotationRollback, plan.Running, true},
		{plan.KindCARotationRollback, plan.Done, false},
		{plan.KindCARotationRollback, plan.Aborted, true},
		{plan.KindUpgrade, plan.Failed, false},
		{plan.KindRollback, plan.Aborted, false},
	} {
		if got := caRollback(&plan.Plan{Kind: tc.kind, State: tc.state}); got != tc.want {
			t.Errorf("caRollback(%s %s) = %v, want %v", tc.kind, tc.state, got, tc.want)
		}
	}
}
