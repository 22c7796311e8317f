package upgrade

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
)

// SwapMemberVersion records in the spec that a member runs version, then
// has its agent restart it on that version. allowDowngrade lets it start an
// older minor than its data dir last ran (only during etcd's downgrade).
// Both halves are idempotent.
func SwapMemberVersion(ctx context.Context, c *cluster.Cluster, name, version string, allowDowngrade bool) error {
	if err := c.RecordMemberVersion(ctx, name, version); err != nil {
		return err
	}
	m, err := c.Member(name) // as recorded
	if err != nil {
		return err
	}
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	// The agent learns the member's whole config (version included) first,
	// so an agent restart starts it on the new version too.
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		return fmt.Errorf("configure member %s: %w", name, err)
	}
	if _, err := ac.SwapVersion(ctx, name, memberrt.VersionRequest{Version: version, AllowMinorDowngrade: allowDowngrade}); err != nil {
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
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	cfg := c.MemberConfig(m)
	cfg.Version, cfg.SnapshotCount = version, 1
	if _, err := ac.PutMember(ctx, cfg); err != nil {
		return fmt.Errorf("configure member %s for a snapshot: %w", name, err)
	}
	_, err = ac.SwapVersion(ctx, name, memberrt.VersionRequest{Version: version, AllowMinorDowngrade: true})
	if err != nil {
		return fmt.Errorf("restart member %s on %s for a snapshot: %w", name, version, err)
	}
	// Wait for a snapshot written by the restarted process: its start and
	// the snapshot's time both come from the agent (the data dir may be
	// on another host; one clock). etcd snapshots once more than
	// snapshot-count entries were applied since the last one, which an
	// idle cluster may never do: each turn without one applies two raft
	// entries that touch no key (a lease granted and revoked).
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = cluster.Poll(wctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		ms, err := ac.Member(ctx, name)
		if err == nil && ms.PID != 0 && ms.NewestSnapshot.After(ms.StartedAt) {
			return true, nil
		}
		nctx, ncancel := context.WithTimeout(ctx, 2*time.Second)
		defer ncancel()
		if l, err := cli.Grant(nctx, 60); err == nil {
			_, _ = cli.Revoke(nctx, l.ID)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("member %s: no raft snapshot in %s within %s", name, cfg.DataDir, timeout)
	}
	c.Progress.Say("member %s took a raft snapshot on %s", name, version)
	return nil
}
