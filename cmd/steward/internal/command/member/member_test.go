package member

import (
	"errors"
	"testing"

	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// TestRemoveHint: each refusal of a remove gets what gets past it.
func TestRemoveHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refusal.New(membership.ErrQuorumAtRisk, "refusing to remove etcd-2: quorum"), "refusing to remove etcd-2: quorum; use --force to remove it anyway"},
		{refusal.New(membership.ErrLastMember, "refusing to remove etcd-1: it is the last member of the cluster"),
			"refusing to remove etcd-1: it is the last member of the cluster; use `steward down --purge` to delete the whole cluster"},
	} {
		got := removeHint(tc.err)
		if got.Error() != tc.want {
			t.Errorf("removeHint = %q, want %q", got, tc.want)
		}
		if !errors.Is(got, errors.Unwrap(tc.err)) {
			t.Errorf("removeHint lost the chain: %v", got)
		}
	}
	if removeHint(nil) != nil {
		t.Error("removeHint(nil) != nil")
	}
}
