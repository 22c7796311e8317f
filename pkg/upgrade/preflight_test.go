package upgrade

import (
	"errors"
	"strings"
	"testing"
)

// TestRefusal: failed overridable checks refuse with ErrOverridableChecks
// (the command names its flag), other failures refuse without it, and a
// forced plan turns overridable failures into warnings. No message names
// a flag.
func TestRefusal(t *testing.T) {
	ok := Check{Name: CheckHealthy, OK: true, Message: "all healthy"}
	leader := Check{Name: CheckLeader, Overridable: true, Message: "leader changed"}
	alarm := Check{Name: CheckAlarms, Message: "NOSPACE raised"}
	for _, tc := range []struct {
		name         string
		checks       []Check
		force        bool
		wantErr      []string // what the error says; nil for no error
		overridable  bool
		wantWarnings int
	}{
		{"all ok", []Check{ok}, false, nil, false, 0},
		{"overridable", []Check{ok, leader}, false, []string{"nothing was changed", "stable-leader: leader changed (overridable)"}, true, 0},
		{"overridable forced", []Check{ok, leader}, true, nil, false, 1},
		{"not overridable", []Check{alarm}, false, []string{"no-alarms: NOSPACE raised"}, false, 0},
		{"not overridable, forced", []Check{alarm, leader}, true, []string{"no-alarms: NOSPACE raised"}, false, 1},
		{"both", []Check{alarm, leader}, false, []string{"no-alarms: NOSPACE raised", "stable-leader: leader changed (overridable)"}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := Refusal(tc.checks, tc.force)
			if len(warnings) != tc.wantWarnings {
				t.Errorf("warnings %q, want %d", warnings, tc.wantWarnings)
			}
			for _, w := range warnings {
				if strings.Contains(w, "--") {
					t.Errorf("warning %q names a flag", w)
				}
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Refusal: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Refusal: no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("error %q names a flag: the command adds that", err)
			}
			if got := errors.Is(err, ErrOverridableChecks); got != tc.overridable {
				t.Errorf("errors.Is(err, ErrOverridableChecks) = %v, want %v", got, tc.overridable)
			}
		})
	}
}
