package upgrade

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// SwapMemberVersion records in the spec that a member runs version, then
// has its agent restart it on that version. allowDowngrade lets it start an
// older minor than its data dir last ran (only during etcd's downgrade).
// Both halves are idempotent.
func SwapMemberVersion(ctx context.Context, c *cluster.Cluster, name, version string, allowDowngrade bool) error {
	if err := c.RecordMemberVersion(name, version); err != nil {
		return err
	}
	m, err := c.Member(name) // as recorded
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

// SnapshotMember restarts a member on version with --snapshot-count=1 so
// that it writes a raft snapshot as soon as it has replayed its WAL, and
// waits until the snapshot file is there. Afterwards the member's WAL
// replay starts after every entry older versions wrote.
func SnapshotMember(ctx context.Context, c *cluster.Cluster, name, version string, timeout time.Duration) error {
	m, err := c.Member(name)
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
	if err := cluster.WaitSnapshot(ctx, cfg.DataDir, started, timeout); err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	c.Progress.Say("member %s took a raft snapshot on %s", name, version)
	return nil
}
