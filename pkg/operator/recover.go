package operator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/status"
)

// Quorum-loss recovery of member pods (issue 29, DEP-01 decision table
// 10) is the hosts' automatic recovery, unchanged: the operator's Steward
// directory of an EtcdCluster is its coordinator's directory, so the
// operator runs recovery.RunAuto on it, as `steward up` runs it for hosts.
// RunAuto decides (recovery.Decide: quorum lost everywhere by the agents'
// own reports, for the whole grace period; a pod whose volume was deleted
// comes back as an agent that runs no member, which counts as down), acts
// through recovery.Run (restart a majority that kept its data; else
// rebuild from a survivor not behind the newest backup, or restore the
// newest backup with its deltas, revisions never going backwards, the
// timeline recorded; then add the others as learners) and records each
// decision, action and count in DIR/status/autorecovery.json. The
// operator reads that file on every reconcile and turns what changed into
// Events and status.lastOperation (Type Recover).
//
// A quorum loss whose members come back with their data (pods deleted,
// claims kept) is no loss to act on: their agents restart the members
// from their volumes and they re-form the cluster; Decide sees them
// running and waits.
//
// Invariant: at most one RunAuto per EtcdCluster directory, and only
// while this replica leads (the loops' context is a leader-elected
// runnable's): autoLoops.mu guards the map of loops.

// autoLoops runs RunAuto once per EtcdCluster whose recovery mode is auto.
type autoLoops struct {
	mu sync.Mutex
	// base is the leader-elected runnable's context (nil until this
	// replica leads), guarded by mu.
	base context.Context
	// loops: resource key -> stop its loop, guarded by mu.
	loops map[string]context.CancelFunc
	// seen: resource key -> what was last turned into Events, guarded
	// by mu.
	seen map[string]recoverySeen
}

type recoverySeen struct {
	lostSince time.Time
	started   time.Time
	result    string
}

// start registers the runnable that gives the loops their context.
func (a *autoLoops) start(mgr manager.Manager) error {
	a.mu.Lock()
	a.loops, a.seen = map[string]context.CancelFunc{}, map[string]recoverySeen{}
	a.mu.Unlock()
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		a.mu.Lock()
		a.base = ctx
		a.mu.Unlock()
		<-ctx.Done()
		a.mu.Lock()
		defer a.mu.Unlock()
		for k, stop := range a.loops {
			stop()
			delete(a.loops, k)
		}
		a.base = nil
		return nil
	}))
}

// ensure runs RunAuto on dir while want, else stops it.
func (a *autoLoops) ensure(key, dir string, want bool, log logr.Logger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loops == nil {
		a.loops, a.seen = map[string]context.CancelFunc{}, map[string]recoverySeen{}
	}
	stop, running := a.loops[key]
	switch {
	case want && !running && a.base != nil:
		ctx, cancel := context.WithCancel(a.base)
		a.loops[key] = cancel
		sl := slog.New(logr.ToSlogHandler(log.WithValues("etcdcluster", key)))
		go recovery.RunAuto(ctx, dir, "", sl)
	case !want && running:
		stop()
		delete(a.loops, key)
	}
}

// forget stops the loop of a deleted resource.
func (a *autoLoops) forget(key string) {
	a.ensure(key, "", false, logr.Discard())
	a.mu.Lock()
	delete(a.seen, key)
	a.mu.Unlock()
}

// recoveryEvents is what changed in the recorded automatic recovery
// since last seen, as Events and an operation.
type recoveryEvents struct {
	events []recoveryEvent
	// op, when set, is the operation to report (Type Recover).
	op *recoveryOp
}

type recoveryEvent struct{ typ, reason, msg string }

type recoveryOp struct{ state, desc string }

// recoveryChanges turns the recorded automatic recovery st into the
// Events and operation not yet reported (prev: what was), and returns what
// is seen now. Pure, for unit tests.
func recoveryChanges(st *status.AutoRecoveryState, prev recoverySeen) (recoveryEvents, recoverySeen) {
	var out recoveryEvents
	if st == nil {
		return out, prev
	}
	now := prev
	if !st.LostSince.IsZero() && !st.LostSince.Equal(prev.lostSince) {
		now.lostSince = st.LostSince
		out.events = append(out.events, recoveryEvent{corev1.EventTypeWarning, "QuorumLost",
			fmt.Sprintf("quorum lost since %s; automatic recovery %s: %s", st.LostSince.UTC().Format(time.RFC3339), st.Decision, st.Reason)})
	}
	a := st.LastAction
	if a == nil || (a.Started.Equal(prev.started) && a.Result == prev.result) {
		return out, now
	}
	now.started, now.result = a.Started, a.Result
	counts := countsText(st.Actions)
	switch a.Result {
	case "running":
		out.events = append(out.events, recoveryEvent{corev1.EventTypeWarning, "Recovering", "automatic recovery started: " + a.Reason})
		out.op = &recoveryOp{"Running", "recovering from quorum loss: " + a.Reason}
	case "success":
		msg := fmt.Sprintf("automatic recovery done (%s): %s; because %s; recoveries so far: %s", a.Action, a.Message, a.Reason, counts)
		out.events = append(out.events, recoveryEvent{corev1.EventTypeNormal, "Recovered", msg})
		out.op = &recoveryOp{"Succeeded", msg}
	case "waited":
		out.events = append(out.events, recoveryEvent{corev1.EventTypeNormal, "RecoveryWaited", "automatic recovery waited: " + a.Error})
	default:
		msg := fmt.Sprintf("automatic recovery failed (%s): %s; it is tried again next round; recoveries so far: %s", a.Action, a.Error, counts)
		out.events = append(out.events, recoveryEvent{corev1.EventTypeWarning, "RecoveryFailed", msg})
		out.op = &recoveryOp{"Failed", msg}
	}
	return out, now
}

func countsText(cs []status.AutoRecoveryCount) string {
	if len(cs) == 0 {
		return "none"
	}
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s %d", c.Action, c.Result, c.Count))
	}
	return strings.Join(parts, ", ")
}

// recovery runs or stops the automatic recovery of ec (started cluster in
// dir) and reports what it recorded since the last reconcile.
func (r *Reconciler) recovery(ctx context.Context, ec *v1alpha1.EtcdCluster, dir, mode string) {
	key := ec.Namespace + "/" + ec.Name
	// The loop outlives this reconcile: the operator's logger, not the
	// reconcile's (whose reconcileID would stick to every line).
	r.auto.ensure(key, dir, mode == "auto", logf.Log.WithName("autorecovery"))
	st, err := status.ReadAutoRecovery(dir)
	if err != nil {
		logf.FromContext(ctx).Error(err, "read the automatic recovery's state")
		return
	}
	r.auto.mu.Lock()
	prev := r.auto.seen[key]
	ch, now := recoveryChanges(st, prev)
	r.auto.seen[key] = now
	r.auto.mu.Unlock()
	for _, e := range ch.events {
		r.event(ec, e.typ, e.reason, "Recover", "%s", e.msg)
	}
	if ch.op != nil {
		r.setOp(ec, "Recover", ch.op.state, ch.op.desc)
	}
}

// ManualRecoveryAdvice is what the Ready condition adds while quorum is
// lost and spec.recovery.mode is manual: the operator does nothing, and
// the recovery is run in its pod on the resource's Steward directory.
func ManualRecoveryAdvice(dir string) string {
	return fmt.Sprintf("; spec.recovery.mode is manual, so the operator does not recover: run `steward recover --dir %s` in the operator's pod (kubectl exec), or set spec.recovery.mode to auto", dir)
}
