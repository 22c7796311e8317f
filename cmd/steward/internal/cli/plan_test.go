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
		{"step error", stepErr, "step 4 (swap etcd-2) failed: member etcd-2 not healthy; fix the cause, then run `steward plan resume` (or `steward plan abort`)", cause, true},
		{"wrapped step error", fmt.Errorf("rollback: %w", stepErr), "rollback: step 4 (swap etcd-2) failed: member etcd-2 not healthy; fix the cause, then run `steward plan resume` (or `steward plan abort`)", cause, true},
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

// TestPlanRefusalHint: a refusal met while planning gets the hint; the
// same refusal inside a failed step does not (the plan keeps its options).
func TestPlanRefusalHint(t *testing.T) {
	kind := errors.New("overridable checks failed")
	refusal := fmt.Errorf("pre-flight: %w", kind)
	got := PlanRefusalHint(refusal, kind, "use --force")
	if want := "pre-flight: overridable checks failed; use --force"; got.Error() != want {
		t.Errorf("before the plan: %q, want %q", got, want)
	}
	if !errors.Is(got, kind) {
		t.Errorf("lost the chain: %v", got)
	}
	stepErr := &plan.StepError{Plan: "upgrade-1", Index: 2, Description: "pre-flight checks", Err: refusal}
	if got := PlanRefusalHint(stepErr, kind, "use --force"); got != error(stepErr) {
		t.Errorf("in a step: %v, want it unchanged", got)
	}
	if PlanRefusalHint(nil, kind, "use --force") != nil {
		t.Error("PlanRefusalHint(nil) != nil")
	}
}
