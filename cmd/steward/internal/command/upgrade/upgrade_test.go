package upgrade

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// TestUpgradeHint: the refusals of planning get the flag that gets past
// them; a refusal in a failed step gets only the resume advice.
func TestUpgradeHint(t *testing.T) {
	checks := refusal.New(upgrade.ErrOverridableChecks, "pre-flight checks failed; nothing was changed:\n  stable-leader: leader changed (overridable)")
	noOnline := refusal.New(upgrade.ErrNoOnlineDowngrade, "etcd 3.5 has no online downgrade to 3.4: the rolling strategy cannot go back there, a restore can")
	for _, tc := range []struct {
		name string
		err  error
		want string // the end of the message
		is   error
	}{
		{"overridable checks", checks, "(overridable); use --force to skip the checks marked overridable", upgrade.ErrOverridableChecks},
		{"no online downgrade", noOnline, "a restore can; roll back with `steward rollback --strategy restore`", upgrade.ErrNoOnlineDowngrade},
		{"agent too old", refusal.New(cluster.ErrAgentTooOld, "the restore strategy: the agent on host cp-2 (member etcd-2) runs a steward that cannot do it (it does not report \"rebuild-datadirs\"); nothing was changed"),
			"nothing was changed; upgrade steward on that host and restart its agent, or use --strategy rolling", cluster.ErrAgentTooOld},
		{"checks in a step", &plan.StepError{Plan: "u1", Index: 4, Description: "pre-flight checks", Err: checks},
			"(overridable); fix the cause, then run `steward plan resume` (or `steward plan abort`)", upgrade.ErrOverridableChecks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := upgradeHint(tc.err)
			if !strings.HasSuffix(got.Error(), tc.want) {
				t.Errorf("upgradeHint = %q, want it to end with %q", got, tc.want)
			}
			if tc.name == "checks in a step" && strings.Contains(got.Error(), "--force") {
				t.Errorf("a failed step got the --force advice: %q", got)
			}
			if !errors.Is(got, tc.is) {
				t.Errorf("upgradeHint lost the chain: %v", got)
			}
		})
	}
	other := fmt.Errorf("the cluster already runs etcd 3.6.16")
	if upgradeHint(other) != other || upgradeHint(nil) != nil {
		t.Error("upgradeHint changed an error it has no advice for")
	}
}
