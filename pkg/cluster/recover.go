package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// RecoverReport says what Recover found and did.
type RecoverReport struct {
	// Action is "none", "restart" or "restore".
	Action   string            `json:"action"`
	DataDirs []datadir.Finding `json:"dataDirs"`
	// NewestBackupRevision is the newest revision in the backup store.
	NewestBackupRevision int64    `json:"newestBackupRevision"`
	RestoredFrom         string   `json:"restoredFrom,omitempty"`
	Replaced             []string `json:"replaced,omitempty"`
	Message              string   `json:"message"`
}

// Recover brings back a cluster that lost quorum, following DEP-01:
//
//   - when a majority of members still have valid data (a WAL and a
//     database that opens), restart them and lose nothing, then replace the
//     members whose data is gone;
//   - otherwise restore the newest backup with its deltas into every member,
//     start them, and take a fresh full snapshot.
//
// A quorate cluster is left alone.
func (c *Cluster) Recover(ctx context.Context) (RecoverReport, error) {
	rep := RecoverReport{Action: "none", DataDirs: []datadir.Finding{}}
	st, err := c.Status(ctx)
	if err != nil {
		return rep, err
	}
	if st.Cluster.Quorate {
		rep.Message = "the cluster is quorate: nothing to recover (replace single members with `steward member replace`)"
		return rep, nil
	}
	c.progress("quorum lost (%s); stopping every member to inspect its data", unhealthySummary(st))
	for _, m := range c.Spec.Members {
		if err := c.StopMember(ctx, m.Name, true); err != nil && !isAgentNotFound(err) {
			return rep, fmt.Errorf("stop %s: %w", m.Name, err)
		}
	}
	store, err := c.BackupStore()
	if err != nil {
		return rep, err
	}
	all, err := backup.List(ctx, store)
	if err != nil {
		return rep, err
	}
	for _, m := range all {
		if st.Cluster.ID == "" || m.ClusterID == st.Cluster.ID {
			rep.NewestBackupRevision = max(rep.NewestBackupRevision, m.EndRevision)
		}
	}
	valid := 0
	var lost []string
	for _, m := range c.Spec.Members {
		f := datadir.Check(spec.Path(c.Dir, m.DataDir))
		note := ""
		if f.State == datadir.Valid && f.Revision < rep.NewestBackupRevision {
			// Not disqualifying: the member replays its WAL on start, and
			// raft brings a majority to the newest committed entry.
			note = fmt.Sprintf(" (database at revision %d, behind the newest backup %d; its WAL replays on start)", f.Revision, rep.NewestBackupRevision)
		}
		c.progress("  %s: %s%s", m.Name, f, note)
		rep.DataDirs = append(rep.DataDirs, f)
		if f.State == datadir.Valid {
			valid++
		} else {
			lost = append(lost, m.Name)
		}
	}
	quorum := len(c.Spec.Members)/2 + 1
	if valid >= quorum {
		rep.Action = "restart"
		c.progress("%d of %d members have valid data (quorum %d): restarting them, nothing is lost", valid, len(c.Spec.Members), quorum)
		for i, m := range c.Spec.Members {
			if rep.DataDirs[i].State == datadir.Valid {
				if err := c.StartMember(ctx, m.Name); err != nil {
					return rep, err
				}
			}
		}
		if err := c.waitQuorum(ctx, 2*time.Minute); err != nil {
			return rep, err
		}
		for _, name := range lost {
			c.progress("replacing %s, whose data is not usable", name)
			if err := c.ReplaceMember(ctx, name, 0); err != nil {
				return rep, fmt.Errorf("quorum is back, but replacing %s failed: %w", name, err)
			}
			rep.Replaced = append(rep.Replaced, name)
		}
		rep.Message = fmt.Sprintf("restarted %d members with valid data; replaced %d", valid, len(rep.Replaced))
		return rep, c.WaitHealthy(ctx, nil)
	}

	rep.Action = "restore"
	if rep.NewestBackupRevision == 0 {
		return rep, fmt.Errorf("only %d of %d members have valid data (quorum %d) and there is no backup to restore: the cluster cannot be recovered by Steward",
			valid, len(c.Spec.Members), quorum)
	}
	c.progress("only %d of %d members have valid data (quorum %d): restoring from backup", valid, len(c.Spec.Members), quorum)
	m, err := c.Restore(ctx, RestoreOptions{Force: true})
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	rep.RestoredFrom = m.ID
	for _, mem := range c.Spec.Members {
		if err := c.StartMember(ctx, mem.Name); err != nil {
			return rep, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitHealthy(wctx, nil); err != nil {
		return rep, err
	}
	if _, err := c.BackupNow(ctx, BackupOptions{}); err != nil {
		return rep, fmt.Errorf("restored, but the fresh full snapshot failed: %w", err)
	}
	rep.Message = fmt.Sprintf("restored every member from %s and its deltas, took a fresh full snapshot; old data dirs were moved aside", m.ID)
	return rep, nil
}

func (c *Cluster) waitQuorum(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := c.Status(ctx)
		return err == nil && st.Cluster.Quorate, nil
	})
}

// RunAutoRecovery watches the cluster from an agent and, when the spec says
// recovery: auto, runs Recover once quorum has been lost for the grace
// period, unless an upgrade or rollback plan is active. Only the first agent of the spec acts, so two agents never recover
// at once. It returns when ctx ends.
func RunAutoRecovery(ctx context.Context, dir, agentName string, log *slog.Logger) {
	var lostSince time.Time
	for ctx.Err() == nil {
		sleepCtx(ctx, 5*time.Second)
		c, err := Open(dir)
		if err != nil || c.Spec.Recovery.Mode != "auto" || len(c.Spec.Agents) == 0 || c.Spec.Agents[0].Name != agentName {
			lostSince = time.Time{}
			continue
		}
		// An upgrade plan stops members on purpose (offline and restore
		// strategies): recovering from a backup then would lose writes.
		if p, err := c.Plans().Latest(); err == nil && p.Active() {
			lostSince = time.Time{}
			continue
		}
		st, err := c.Status(ctx)
		if err != nil || st.Cluster.Quorate {
			lostSince = time.Time{}
			continue
		}
		if lostSince.IsZero() {
			lostSince = time.Now()
			log.Warn("quorum lost; automatic recovery after the grace period", "grace", c.Spec.Recovery.GracePeriodSeconds)
			continue
		}
		if time.Since(lostSince) < time.Duration(c.Spec.Recovery.GracePeriodSeconds)*time.Second {
			continue
		}
		log.Warn("quorum lost for the whole grace period: recovering")
		rep, err := c.Recover(ctx)
		if err != nil {
			log.Error("automatic recovery failed", "err", err)
		} else {
			log.Info("automatic recovery done", "action", rep.Action, "message", rep.Message)
		}
		lostSince = time.Time{}
	}
}
