package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/refusal"
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
// A host's agent that runs no such member (memberrt.ErrNotFound) has no
// data of it: Empty.
func (c *Cluster) CheckDataDir(ctx context.Context, m spec.Member) (datadir.Finding, error) {
	if !c.OnOtherHost(m) {
		return datadir.Check(spec.Path(c.Dir, m.DataDir)), nil
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return datadir.Finding{}, err
	}
	var f datadir.Finding
	if err := ac.DataDir(ctx, m.Name, &f); memberrt.IsNotFound(err) {
		// The host's agent runs no such member: its directory was lost
		// and it joined again (a member pod whose volume was deleted), so
		// the member has no data there.
		return datadir.Finding{DataDir: m.DataDir, State: datadir.Empty}, nil
	} else if err != nil {
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
	if memberrt.IsNotFound(err) {
		return "", nil // no such member there, so no data dir (CheckDataDir)
	}
	if err != nil {
		return "", fmt.Errorf("on host %s: %w", m.Agent, err)
	}
	return aside, nil
}

// ErrNotAcrossHosts refuses an operation that is built for members of
// this machine's agent only (a certificate take-over of an adopted
// cluster) for members on other hosts.
var ErrNotAcrossHosts = errors.New("not supported for members on other hosts yet")

// CapRebuildDataDirs is what an agent must report for the upgrade
// strategies that rebuild data dirs (offline, restore) on its host.
const CapRebuildDataDirs = agentapi.CapRebuildDataDirs

// ErrAgentTooOld refuses an operation that needs of a host's agent what
// its version cannot do (it does not report the capability,
// agentapi.AgentInfo.Capabilities).
var ErrAgentTooOld = errors.New("agent too old")

// RequireCapability fails with ErrAgentTooOld, naming each host and its
// members, when the agent of any of members on another host does not
// report capability (an agentapi.Cap* constant), or with the error of an
// agent that does not answer. It asks before anything changes; what names
// the operation. Members of this machine's agent are not asked: it is this
// steward.
func (c *Cluster) RequireCapability(ctx context.Context, what, capability string, members ...spec.Member) error {
	asked := map[string]bool{}
	var old []string
	for _, m := range members {
		if !c.OnOtherHost(m) || asked[m.Agent] {
			continue
		}
		asked[m.Agent] = true
		ac, err := c.AgentFor(m)
		if err != nil {
			return err
		}
		info, err := ac.Info(ctx)
		if err != nil {
			return fmt.Errorf("%s: ask the agent on host %s what it can do: %w; nothing was changed", what, m.Agent, err)
		}
		if !slices.Contains(info.Capabilities, capability) {
			old = append(old, fmt.Sprintf("host %s (member %s)", m.Agent, m.Name))
		}
	}
	if len(old) == 0 {
		return nil
	}
	return refusal.New(ErrAgentTooOld, "%s: the agent on %s runs a steward that cannot do it (it does not report %q); nothing was changed", what, strings.Join(old, ", "), capability)
}
