package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
)

// TestPlanHint: a failed step's error gets the next-step hint, and keeps its
// chain; any other error passes unchanged.
func TestPlanHint(t *testing.T) {
	cause := errors.New("member etcd-2 not healthy")
	stepErr := &plan.StepError{Plan: "upgrade-1", Index: 3, Description: "swap etcd-2", Err: cause}
	other := errors.New("another steward process is running a plan")
	for _, tc := range []struct {
		name    string
		err     error
		want    string // "" for nil
		wantIs  error
		hasHint bool
	}{
		{"nil", nil, "", nil, false},
		{"other error", other, other.Error(), other, false},
		{"step error", stepErr, "step 3 (swap etcd-2) failed: member etcd-2 not healthy; fix the cause, then run `steward plan resume` (or `steward plan abort`)", cause, true},
		{"wrapped step error", fmt.Errorf("rollback: %w", stepErr), "rollback: step 3 (swap etcd-2) failed: member etcd-2 not healthy; fix the cause, then run `steward plan resume` (or `steward plan abort`)", cause, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanHint(tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("Hint(nil) = %v", got)
				}
				return
			}
			if got.Error() != tc.want {
				t.Fatalf("Hint: %q, want %q", got.Error(), tc.want)
			}
			if !errors.Is(got, tc.wantIs) {
				t.Fatalf("Hint lost the chain: errors.Is(%v, %v) = false", got, tc.wantIs)
			}
			if !tc.hasHint && got != tc.err {
				t.Fatalf("Hint changed an error that is no step's: %v", got)
			}
		})
	}
}
