package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
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
	NewestBackupRevision int64  `json:"newestBackupRevision"`
	RestoredFrom         string `json:"restoredFrom,omitempty"`
	// Seed is the member a restore went into; Added, the members then added
	// to it as learners; FreshBackup, the full snapshot taken in between.
	Seed        string   `json:"seed,omitempty"`
	Added       []string `json:"added,omitempty"`
	FreshBackup string   `json:"freshBackup,omitempty"`
	// Replaced are the members without valid data re-added after a restart.
	Replaced []string `json:"replaced,omitempty"`
	Message  string   `json:"message"`
}

// Recover brings back a cluster that lost quorum, following DEP-01:
//
//   - when a majority of members still have valid data (a WAL and a
//     database that opens), restart them and lose nothing, then replace the
//     members whose data is gone;
//   - otherwise restore the newest backup with its deltas into one member,
//     take a fresh full snapshot, and add the others (recoverFromBackup).
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
	// One recovery at a time (a manual one and the agent's automatic one
	// could otherwise race), and none under an upgrade plan, which stops
	// members on purpose.
	lock, err := filelock.TryLock(c.recoverLockPath())
	if errors.Is(err, filelock.ErrHeld) {
		return rep, fmt.Errorf("another steward process is recovering this cluster (%s is held); wait for it to finish", c.recoverLockPath())
	}
	if err != nil {
		return rep, err
	}
	defer lock.Release()
	if p, err := c.Plans().Latest(); err == nil && p.Active() {
		return rep, fmt.Errorf("refusing to recover: plan %s is %s and stops members on purpose; resume it (`steward plan resume`) or abort it (`steward plan abort`) first", p.ID, p.State)
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
	c.progress("only %d of %d members have valid data (quorum %d): restoring from backup into one member, then adding the others", valid, len(c.Spec.Members), quorum)
	return rep, c.recoverFromBackup(ctx, &rep)
}

// recoverFromBackup is DEP-01's recovery of a cluster whose majority lost
// its data, in the order the design gives:
//
//  1. restore the newest backup, with its deltas applied, into one member
//     (the seed: the first member of the spec). It records the whole spec
//     as its initial cluster, so its member ID and the cluster ID are kept
//     and the old chain of backups stays this cluster's;
//  2. run the seed alone, on a private client port, with
//     --force-new-cluster until a write commits: etcd drops the other
//     members from the membership, and the seed is a cluster of one;
//  3. start it for clients and take a fresh full snapshot;
//  4. add every other member as a learner (its data dir moved aside, never
//     deleted) that receives the restored data from the seed, and promote
//     it once it has caught up.
//
// If a member cannot be added, the cluster stays up with the members that
// were, and the error says how to add the rest (`steward member replace`).
func (c *Cluster) recoverFromBackup(ctx context.Context, rep *RecoverReport) error {
	seed := c.Spec.Members[0]
	rep.Seed = seed.Name
	m, err := c.Restore(ctx, RestoreOptions{Force: true, Members: []string{seed.Name}})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	rep.RestoredFrom = m.ID
	c.progress("%s: running it alone with --force-new-cluster on a private client port until a write commits", seed.Name)
	if err := c.RunIsolated(ctx, []string{seed.Name}, c.Spec.VersionOf(seed), IsolatedOptions{ForceNewCluster: true, Timeout: 2 * time.Minute}); err != nil {
		return fmt.Errorf("make %s a cluster of one: %w (re-run `steward recover`: the restore is repeated)", seed.Name, err)
	}
	if err := c.StartMember(ctx, seed.Name); err != nil {
		return err
	}
	if err := c.waitMemberHealthy(ctx, seed.Name, 2*time.Minute); err != nil {
		return fmt.Errorf("restored %s does not become healthy: %w", seed.Name, err)
	}
	full, err := c.BackupNow(ctx, BackupOptions{Member: seed.Name})
	if err != nil {
		return fmt.Errorf("%s is restored and serves, but the fresh full snapshot failed: %w (the other members were not added yet: `steward member replace NAME` adds each)", seed.Name, err)
	}
	c.progress("fresh full snapshot %s of the restored member (revision %d)", full.ID, full.EndRevision)
	rep.FreshBackup = full.ID
	cli, err := c.Client(seed.ClientURL)
	if err != nil {
		return err
	}
	defer cli.Close()
	var failed []string
	var errs []error
	for _, mem := range c.Spec.Members[1:] {
		c.progress("adding %s as a learner; it receives the restored data from %s", mem.Name, seed.Name)
		ac, err := c.AgentFor(mem)
		if err == nil {
			err = c.rejoin(ctx, cli, ac, mem, 10*time.Minute)
		}
		if err != nil {
			failed = append(failed, mem.Name)
			errs = append(errs, fmt.Errorf("add %s: %w", mem.Name, err))
			continue
		}
		rep.Added = append(rep.Added, mem.Name)
	}
	if len(failed) > 0 {
		return fmt.Errorf("the cluster is back (restored %s from %s, added %v), but %d members could not be added: %w; once their hosts are fixed, run `steward member replace NAME` for each of %v",
			seed.Name, m.ID, rep.Added, len(failed), errors.Join(errs...), failed)
	}
	rep.Message = fmt.Sprintf("restored %s from %s and its deltas, took the fresh full snapshot %s, then added %d members as learners and promoted them; old data dirs were moved aside",
		seed.Name, m.ID, full.ID, len(rep.Added))
	return c.WaitHealthy(ctx, nil)
}

func (c *Cluster) recoverLockPath() string { return filepath.Join(c.Dir, "run", "recover.lock") }

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
