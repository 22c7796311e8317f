package rollback

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// TestRollbackHint: the refusals of planning a rollback get this command's
// flags.
func TestRollbackHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{cluster.Refuse(upgrade.ErrOverridableChecks, "pre-flight checks failed"), "pre-flight checks failed; use --force to skip the checks marked overridable"},
		{cluster.Refuse(upgrade.ErrNoOnlineDowngrade, "etcd 3.5 has no online downgrade to 3.4"), "etcd 3.5 has no online downgrade to 3.4; roll back with --strategy restore"},
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
