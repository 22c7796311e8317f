package upgrade

import (
	"errors"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
)

// TestAdmitRollback: an etcd rollback supersedes an open upgrade and does
// not wait for an adoption, but refuses under an open plan of any other
// kind: a CA rotation, a rollback, and a Kubernetes upgrade stopped
// half-way (its API servers may need the etcd it found), which it used to
// run beneath.
func TestAdmitRollback(t *testing.T) {
	for _, tc := range []struct {
		kind   plan.Kind
		state  plan.State
		refuse bool
	}{
		{plan.KindUpgrade, plan.Failed, false},
		{plan.KindAdopt, plan.Running, false},
		{plan.KindRollback, plan.Failed, true},
		{plan.KindCARotation, plan.Failed, true},
		{"kube-upgrade", plan.Failed, true},
		{"kube-rollback", plan.Running, true},
		{"kube-upgrade", plan.Done, false},
	} {
		store := plan.OpenStore(t.TempDir())
		if err := store.Save(t.Context(), &plan.Plan{ID: string(tc.kind) + "-1", Kind: tc.kind, State: tc.state}); err != nil {
			t.Fatal(err)
		}
		_, err := plan.Admit(store, admitRollback)
		var active *plan.ActiveError
		if got := errors.As(err, &active); got != tc.refuse {
			t.Errorf("%s %s: admit = %v, want refused %v", tc.kind, tc.state, err, tc.refuse)
		}
	}
}
