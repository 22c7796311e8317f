package up

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestUpHint: a refused option gets its flag's name (a member count, the
// commands that change it), a spec of no member
// the --members flag, an agent that does not answer the command that
// starts it; every chain is kept.
func TestUpHint(t *testing.T) {
	option := func(name, msg string) error {
		return &bootstrap.OptionError{Refusal: refusal.Refusal{Kind: bootstrap.ErrNewClusterOnly, Msg: msg}, Option: name}
	}
	down := &bootstrap.AgentDownError{Member: "etcd-4", Agent: "host2", Address: "unix:///d/run/agent-host2.sock", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		err  error
		want string
		is   error
	}{
		{option("Members", "/d/cluster.yaml already describes 3 members; the member count applies only to a new cluster"),
			"--members: /d/cluster.yaml already describes 3 members; the member count applies only to a new cluster (use `steward member add` or `remove`)", bootstrap.ErrNewClusterOnly},
		{option("Version", "v"), "--version: v", bootstrap.ErrNewClusterOnly},
		{option("TLSOff", "t"), "--insecure-no-tls: t", bootstrap.ErrNewClusterOnly},
		{option("BinaryStore", "b"), "--binary-store: b", bootstrap.ErrNewClusterOnly},
		{option("Address", "a"), "--address: a", bootstrap.ErrNewClusterOnly},
		{fmt.Errorf("address x: %w", bootstrap.ErrAddress), "--address: address x: not an address this machine can listen on", bootstrap.ErrAddress},
		{fmt.Errorf("%w, got -1", spec.ErrTooFewMembers), "--members: a cluster needs at least one member, got -1", spec.ErrTooFewMembers},
		{down, "member etcd-4: agent host2 does not answer at unix:///d/run/agent-host2.sock (connection refused): start it on its host (`steward agent --name host2`)", down.Err},
	} {
		got := upHint(tc.err)
		if got.Error() != tc.want {
			t.Errorf("upHint = %q, want %q", got, tc.want)
		}
		if !errors.Is(got, tc.is) {
			t.Errorf("upHint lost the chain: %v", got)
		}
	}
	other := errors.New("port in use")
	if upHint(other) != other || upHint(nil) != nil {
		t.Error("upHint changed an error it has no advice for")
	}
}
