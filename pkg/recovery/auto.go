package recovery

import (
	"context"
	"log/slog"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/metrics"
	"github.com/etcd-steward/steward/pkg/plan"
)

// RunAuto watches the cluster from an agent and, when the spec says
// recovery: auto, runs Recover once quorum has been lost for the grace
// period, unless an upgrade or rollback plan is active, and resumes a
// recovery that was interrupted (recoveryJournal). Only the first agent of
// the spec acts, so two agents never recover at once. It returns when ctx
// ends.
func RunAuto(ctx context.Context, dir, agentName string, log *slog.Logger) {
	var lostSince, lastResume time.Time
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c, err := cluster.Open(dir)
		if err != nil || c.Spec.Recovery.Mode != "auto" || len(c.Spec.Agents) == 0 || c.Spec.Agents[0].Name != agentName {
			lostSince = time.Time{}
			continue
		}
		// An upgrade plan stops members on purpose (offline and restore
		// strategies): recovering from a backup then would lose writes.
		if _, err := plan.Admit(c.Plans(), admitRecovery); err != nil {
			lostSince = time.Time{}
			continue
		}
		// A recovery that stopped after its seed took over (a crash, an
		// unreachable host) is finished without waiting for quorum loss:
		// the seed alone is quorate, and the members it lacks would
		// otherwise never be added. At most once a minute.
		if j, err := readRecoveryJournal(c); err == nil && j != nil {
			if time.Since(lastResume) >= time.Minute {
				lastResume = time.Now()
				log.Warn("an unfinished recovery is recorded: resuming it", "seed", j.Seed, "restoredFrom", j.RestoredFrom)
				rep, err := Run(ctx, c)
				metrics.RecoveryAction(rep.Action, err)
				if err != nil {
					log.Error("resuming the recovery failed", "err", err)
				} else {
					log.Info("automatic recovery done", "action", rep.Action, "message", rep.Message)
				}
			}
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
		rep, err := Run(ctx, c)
		metrics.RecoveryAction(rep.Action, err)
		if err != nil {
			log.Error("automatic recovery failed", "err", err)
		} else {
			log.Info("automatic recovery done", "action", rep.Action, "message", rep.Message)
		}
		lostSince = time.Time{}
	}
}
