package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/plan"
)

// CondUpgradeInProgress is true while an upgrade or rollback plan has work
// left: running, failed (waiting for resume or abort) or interrupted.
const CondUpgradeInProgress = "UpgradeInProgress"

// SwapMemberVersion records in the spec that a member runs version, then
// has its agent restart it on that version. allowDowngrade lets it start an
// older minor than its data dir last ran (only during etcd's downgrade).
// Both halves are idempotent.
func (c *Cluster) SwapMemberVersion(ctx context.Context, name, version string, allowDowngrade bool) error {
	if err := c.recordMemberVersion(name, version); err != nil {
		return err
	}
	m, err := c.memberOrError(name) // as recorded
	if err != nil {
		return err
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return err
	}
	// The agent learns the member's whole config (version included) first,
	// so an agent restart starts it on the new version too.
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		return fmt.Errorf("configure member %s: %w", name, err)
	}
	if _, err := ac.SwapVersion(ctx, name, agentapi.VersionRequest{Version: version, AllowMinorDowngrade: allowDowngrade}); err != nil {
		return fmt.Errorf("swap member %s to etcd %s: %w", name, version, err)
	}
	return nil
}

// recordMemberVersion records in the spec that a member's data runs
// version (a per-member override while a plan is halfway).
func (c *Cluster) recordMemberVersion(name, version string) error {
	m, err := c.memberOrError(name)
	if err != nil || c.Spec.VersionOf(m) == version {
		return err
	}
	s := c.Spec.Clone()
	for i := range s.Members {
		if s.Members[i].Name == name {
			s.Members[i].Version = version
			if version == s.Version {
				s.Members[i].Version = ""
			}
		}
	}
	if err := c.saveSpec(s); err != nil {
		return fmt.Errorf("record version %s for member %s: %w", version, name, err)
	}
	return nil
}

// SetVersion makes version the cluster's version in the spec and drops
// per-member overrides that equal it.
func (c *Cluster) SetVersion(version string) error {
	s := c.Spec.Clone()
	s.Version = version
	for i := range s.Members {
		if s.Members[i].Version == version {
			s.Members[i].Version = ""
		}
	}
	return c.saveSpec(s)
}

// Plans returns the plan store of the Steward directory.
func (c *Cluster) Plans() *plan.Store { return plan.OpenStore(c.Dir) }

// upgradeCondition reports the latest plan's state.
func (c *Cluster) upgradeCondition() Condition {
	cond := Condition{Type: CondUpgradeInProgress, Status: "False", Reason: "NoPlan", Message: "no upgrade or rollback plan"}
	st := c.Plans()
	p, err := st.Latest()
	switch {
	case errors.Is(err, plan.ErrNoPlan):
		return cond
	case err != nil:
		cond.Status, cond.Reason, cond.Message = "Unknown", "PlanUnreadable", err.Error()
		return cond
	}
	what := fmt.Sprintf("%s plan %s (etcd %s to %s)", p.Kind, p.ID, p.From, p.To)
	step := p.Current()
	switch {
	case p.State == plan.Failed:
		cond.Status, cond.Reason = "True", "Failed"
		cond.Message = fmt.Sprintf("%s failed: %s; fix the cause, then `steward plan resume` or `steward plan abort`", what, p.Error)
	case p.Active() && !st.Locked():
		cond.Status, cond.Reason = "True", "Interrupted"
		cond.Message = fmt.Sprintf("%s was interrupted; no process runs it: `steward plan resume`", what)
	case p.Active():
		cond.Status, cond.Reason = "True", "Running"
		cond.Message = what
		if step != nil {
			cond.Message += fmt.Sprintf(": step %d/%d, %s", step.Index, len(p.Steps)-1, step.Description)
		}
	default:
		cond.Reason = "Plan" + stateWord(p.State)
		cond.Message = fmt.Sprintf("last plan: %s, %s", what, p.State)
	}
	return cond
}

func stateWord(s plan.State) string {
	switch s {
	case plan.Done:
		return "Done"
	case plan.Aborted:
		return "Aborted"
	case plan.RolledBack:
		return "RolledBack"
	}
	return "Unknown"
}

// SnapshotMember restarts a member on version with --snapshot-count=1 so
// that it writes a raft snapshot as soon as it has replayed its WAL, and
// waits until the snapshot file is there. Afterwards the member's WAL
// replay starts after every entry older versions wrote.
func (c *Cluster) SnapshotMember(ctx context.Context, name, version string, timeout time.Duration) error {
	m, err := c.memberOrError(name)
	if err != nil {
		return err
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return err
	}
	cfg := c.MemberConfig(m)
	cfg.Version, cfg.SnapshotCount = version, 1
	started := time.Now()
	if _, err := ac.PutMember(ctx, cfg); err != nil {
		return fmt.Errorf("configure member %s for a snapshot: %w", name, err)
	}
	if _, err := ac.SwapVersion(ctx, name, agentapi.VersionRequest{Version: version, AllowMinorDowngrade: true}); err != nil {
		return fmt.Errorf("restart member %s on %s for a snapshot: %w", name, version, err)
	}
	if err := waitSnapshot(ctx, cfg.DataDir, started, timeout); err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	c.progress("member %s took a raft snapshot on %s", name, version)
	return nil
}
