package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
)

// autoInterval is how often RunAuto looks at the cluster.
const autoInterval = 5 * time.Second

// RunAuto watches the cluster and, when the spec says recovery: auto, runs
// Recover once quorum has been lost for the grace period, unless an upgrade
// or rollback plan is active, and resumes a recovery that was interrupted
// (recoveryJournal). It returns when ctx ends.
//
// Who acts: on one host, only the spec's first agent (agentName), so two
// agents never recover at once. On a multi-host cluster, only the
// coordinator's directory (cluster.Admin: its agent, or the `certs renew
// --watch` process `steward up` starts there; agentName is then not used),
// and only when Decide proves quorum lost everywhere for the whole grace
// period, and only while no other coordinator took over. A host's agent
// never acts. The recover lock (Run) admits one recovery per directory, and
// the journal lets the next run resume one that was interrupted.
//
// Each round's decision and each action, with their reasons, are recorded
// in DIR/status/autorecovery.json (cluster.AutoRecoveryState), which
// `steward status` shows; each action is counted there too (Actions), which
// the metrics collector exports as steward_recovery_actions_total; on a
// multi-host cluster the sharer (share.go) pushes the counts to every
// host's agent, which exports them too.
func RunAuto(ctx context.Context, dir, agentName string, log *slog.Logger) {
	counted := make(chan struct{}, 1)
	a := &autoLoop{dir: dir, agent: agentName, log: log, recover: runAuto, counted: counted}
	sh := newSharer(dir, log)
	go sh.run(ctx, counted)
	tick := time.NewTicker(autoInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.round(ctx)
	}
}

// autoLoop is one RunAuto's state; only its goroutine uses it.
type autoLoop struct {
	dir, agent string
	log        *slog.Logger
	lostSince  time.Time // quorum first seen lost (zero while quorate)
	// provenSince is when Decide first proved quorum lost everywhere (a
	// multi-host cluster; zero otherwise).
	provenSince time.Time
	lastResume  time.Time
	// recover runs one automatic recovery (runAuto; tests give another).
	recover func(context.Context, *cluster.Cluster) (Report, error)
	// counted is signalled (never blocking) after an action is counted:
	// the sharer pushes the counts to the hosts' agents. Nil in tests.
	counted chan<- struct{}
}

func (a *autoLoop) reset() { a.lostSince, a.provenSince = time.Time{}, time.Time{} }

// record writes the round's decision, keeping the last action.
func (a *autoLoop) record(decision, reason string) {
	st, _ := status.ReadAutoRecovery(a.dir)
	if st == nil {
		st = &status.AutoRecoveryState{}
	}
	// The first round gives the directory its recorder ID, which the
	// hosts' agents label its counts with (status.EnsureRecorder).
	if !st.EnsureRecorder() && st.Decision == decision && st.Reason == reason && st.LostSince.Equal(a.lostSince) {
		return
	}
	st.Decision, st.Reason, st.DecidedAt, st.LostSince = decision, reason, time.Now().UTC(), a.lostSince
	if err := status.WriteAutoRecovery(a.dir, st); err != nil {
		a.log.Error("record the automatic recovery's decision", "err", err)
	}
}

// act runs Run, recording it before (running) and after, and counts it
// in the state file (status.AutoRecoveryState.Actions). An action whose
// process dies before it ends is not counted; its resume is.
func (a *autoLoop) act(ctx context.Context, c *cluster.Cluster, decision, reason string) {
	st, _ := status.ReadAutoRecovery(a.dir)
	if st == nil {
		st = &status.AutoRecoveryState{}
	}
	if c.Spec.MultiHost() {
		// A coordinator another machine took over from acts no more.
		if err := fence(ctx, c); err != nil {
			a.record("wait", err.Error())
			return
		}
	}
	now := time.Now().UTC()
	st.EnsureRecorder()
	st.Decision, st.Reason, st.DecidedAt, st.LostSince = decision, reason, now, a.lostSince
	st.LastAction = &status.AutoRecoveryAction{Action: "recover", Reason: reason, Started: now, Result: "running"}
	if err := status.WriteAutoRecovery(a.dir, st); err != nil {
		// Acting unrecorded would leave status without its reason.
		a.log.Error("record the automatic recovery's action; not acting", "err", err)
		return
	}
	a.log.Warn("automatic recovery", "decision", decision, "reason", reason)
	c.Progress = func(format string, args ...any) { a.log.Info(fmt.Sprintf(format, args...)) }
	rep, err := a.recover(ctx, c)
	// A recovery that stopped before any disruptive action (quorum not
	// proven lost everywhere, or another process of this directory holds
	// recover.lock) waited: the round's decision is a wait, its reason
	// the error, and it is not counted as a failure (a partition would
	// otherwise fire StewardAutoRecoveryFailed every minute).
	waited := errors.Is(err, ErrNotProven) || errors.Is(err, filelock.ErrHeld)
	last := *st.LastAction
	last.Action, last.Finished, last.Message = rep.Action, time.Now().UTC(), rep.Message
	last.Result = "success"
	switch {
	case waited:
		last.Result, last.Error = "waited", err.Error()
		a.log.Warn("automatic recovery waited", "action", rep.Action, "reason", err)
	case err != nil:
		last.Result, last.Error = "failure", err.Error()
		a.log.Error("automatic recovery failed", "action", rep.Action, "err", err)
	default:
		a.log.Info("automatic recovery done", "action", rep.Action, "message", rep.Message)
	}
	// The result and its count go in one write, onto the file as it is
	// now (not the copy read before acting: another process of this
	// directory may have counted meanwhile). The metrics collector of the
	// directory's agent exports the counts (steward_recovery_actions_total),
	// whichever process acted.
	cur, rerr := status.ReadAutoRecovery(a.dir)
	if rerr != nil || cur == nil {
		cur = st
	}
	if waited {
		cur.Decision, cur.Reason = "wait", err.Error()
	} else {
		cur.EnsureRecorder()
		cur.CountAction(rep.Action, reasonCode(decision), last.Result)
	}
	cur.LastAction = &last
	if err := status.WriteAutoRecovery(a.dir, cur); err != nil {
		a.log.Error("record the automatic recovery's result", "err", err)
	} else if !waited && a.counted != nil {
		// The hosts' agents get the new count now, not at the sharer's
		// next tick.
		select {
		case a.counted <- struct{}{}:
		default:
		}
	}
	a.reset()
}

// reasonCode is the `reason` a recovery acted on decision is counted
// under (status.Reason*).
func reasonCode(decision string) string {
	if decision == "resume" {
		return status.ReasonUnfinished
	}
	return status.ReasonQuorumLost
}

func (a *autoLoop) round(ctx context.Context) {
	c, err := cluster.Open(a.dir)
	if err != nil || c.Spec.Recovery.Mode != "auto" || len(c.Spec.Agents) == 0 {
		a.reset()
		return
	}
	multi := c.Spec.MultiHost()
	// On a multi-host cluster only the coordinator's directory acts (a
	// host's copy of the spec: its agent never acts, docs/hosts.md); on
	// one host only the spec's first agent.
	if !c.AutoRecoveryActor(a.agent) {
		a.reset()
		return
	}
	// An upgrade plan stops members on purpose (offline and restore
	// strategies): recovering from a backup then would lose writes.
	if _, err := plan.Admit(c.Plans(), admitRecovery); err != nil {
		a.reset()
		a.record("wait", err.Error())
		return
	}
	// A recovery that stopped after its seed took over (a crash, an
	// unreachable host) is finished without waiting for quorum loss:
	// the seed alone is quorate, and the members it lacks would
	// otherwise never be added. At most once a minute.
	if j, err := readRecoveryJournal(c); err == nil && j != nil {
		if time.Since(a.lastResume) >= time.Minute {
			a.lastResume = time.Now()
			// A stale journal (Reseeding while quorate): logged and left
			// for the operator, never resumed (staleReseed).
			if j.Reseeding {
				if st, err := status.LiveMembers(ctx, c); err == nil {
					if err := staleReseed(c, j, st.Cluster.Quorate); err != nil {
						a.log.Error("not resuming the recorded recovery", "err", err)
						a.record("wait", err.Error())
						a.reset()
						return
					}
				}
			}
			a.act(ctx, c, "resume", fmt.Sprintf("an unfinished recovery is recorded (seed %s, %s): resuming it", j.Seed, j.origin()))
		}
		a.reset()
		return
	}
	// The live members only: quorum, the members' processes and health,
	// the agents' reachability are all Observe reads; the conditions
	// (the backup store's listing, certificate handshakes) every 5 s
	// would be work for nothing.
	st, err := status.LiveMembers(ctx, c)
	if err != nil {
		a.reset()
		return
	}
	if st.Cluster.Quorate {
		if !a.lostSince.IsZero() {
			a.log.Info("quorum is back; no recovery")
		}
		a.reset()
		a.record("none", "the cluster is quorate")
		return
	}
	grace := time.Duration(c.Spec.Recovery.GracePeriodSeconds) * time.Second
	if a.lostSince.IsZero() {
		a.lostSince = time.Now().UTC()
		a.log.Warn("quorum lost; automatic recovery after the grace period", "grace", grace)
	}
	reason := "quorum lost as seen from this agent"
	since := a.lostSince
	if multi {
		d := Decide(Observe(st, c))
		reason = d.Reason
		if !d.Act {
			a.provenSince = time.Time{}
			a.record("wait", reason)
			return
		}
		if a.provenSince.IsZero() {
			a.provenSince = time.Now().UTC()
		}
		since = a.provenSince
	}
	if left := grace - time.Since(since); left > 0 {
		a.record("wait", fmt.Sprintf("%s; acting after the grace period of %s (%s left)", reason, grace, left.Round(time.Second)))
		return
	}
	a.act(ctx, c, "act", fmt.Sprintf("%s, for the whole grace period of %s", reason, grace))
}

// fence fails when another coordinator took over (handover.ErrSuperseded)
// or when the store cannot tell: acting on a stale directory could run a
// second recovery beside the new coordinator's. The automatic loop checks
// it before it records acting, and Run under recover.lock, before it stops
// any member (a manual recovery too), for a multi-host spec.
func fence(ctx context.Context, c *cluster.Cluster) error {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h, err := c.Handover(hctx)
	if err == nil {
		err = h.Check(hctx)
	}
	if errors.Is(err, handover.ErrSuperseded) {
		return fmt.Errorf("not acting: %w", err)
	}
	if err != nil {
		return fmt.Errorf("not acting: cannot check that this is still the coordinator: %w", err)
	}
	return nil
}

// Observe turns a status into Decide's input: for each member of the
// spec, whether its agent answered and its process state.
func Observe(st *status.Status, c *cluster.Cluster) Observation {
	reach := map[string]bool{}
	for _, ag := range st.Agents {
		reach[ag.Name] = ag.Reachable
	}
	o := Observation{Quorate: st.Cluster.Quorate}
	for _, m := range c.Spec.Members {
		v := MemberView{Name: m.Name, Agent: m.Agent, AgentReachable: reach[m.Agent]}
		if ms, ok := st.Member(m.Name); ok {
			v.Process, v.Healthy = ms.Process, ms.Healthy
		}
		o.Members = append(o.Members, v)
	}
	return o
}
