package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// A member's data dir lives on its agent's host: on this machine for an
// agent here (the coordinator's file system), else on another host, where
// only its agent reaches it. These helpers pick the way.

// OnOtherHost reports whether a member runs on an agent on another host.
func (c *Cluster) OnOtherHost(m spec.Member) bool {
	a, ok := c.Spec.Agent(m.Agent)
	return ok && a.Remote()
}

// CheckDataDir inspects a member's data dir without etcd, where it lives.
func (c *Cluster) CheckDataDir(ctx context.Context, m spec.Member) (datadir.Finding, error) {
	if !c.OnOtherHost(m) {
		return datadir.Check(spec.Path(c.Dir, m.DataDir)), nil
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return datadir.Finding{}, err
	}
	var f datadir.Finding
	if err := ac.DataDir(ctx, m.Name, &f); err != nil {
		return datadir.Finding{}, fmt.Errorf("inspect the data dir of %s on host %s: %w", m.Name, m.Agent, err)
	}
	return f, nil
}

// MoveDataDirAside moves a stopped member's data dir aside where it lives
// (DATADIR.REASON-STAMP: nothing is deleted) and returns where it went.
func (c *Cluster) MoveDataDirAside(ctx context.Context, m spec.Member, reason string) (string, error) {
	if !c.OnOtherHost(m) {
		return datadir.MoveAside(spec.Path(c.Dir, m.DataDir), reason)
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return "", err
	}
	aside, err := ac.MoveDataDirAside(ctx, m.Name, reason)
	if err != nil {
		return "", fmt.Errorf("on host %s: %w", m.Agent, err)
	}
	return aside, nil
}

// ErrNotAcrossHosts refuses an operation that builds data dirs on this
// machine's file system (a restore, a recovery from a seed, the offline and
// restore upgrade strategies) for members on other hosts: it is not built
// across hosts yet, and doing it here would write where no member reads.
var ErrNotAcrossHosts = errors.New("not supported for members on other hosts yet")

// RequireHere fails with ErrNotAcrossHosts, naming the members and their
// hosts, when any of members runs on another host. what names the
// operation.
func (c *Cluster) RequireHere(what string, members ...spec.Member) error {
	var far []string
	for _, m := range members {
		if c.OnOtherHost(m) {
			far = append(far, m.Name+" on host "+m.Agent)
		}
	}
	if len(far) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w (%s): it builds data dirs on this machine; nothing was changed", what, ErrNotAcrossHosts, strings.Join(far, ", "))
}
