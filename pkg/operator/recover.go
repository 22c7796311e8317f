package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/status"
)

// Quorum-loss recovery of member pods (issue 29, DEP-01 decision table
// 10) is the hosts' automatic recovery, unchanged: the operator's Steward
// directory of an EtcdCluster is the coordinator's directory, and the
// coordinator's process beside it, `steward certs renew --watch` (started
// by bootstrap.Up, and again by every reconcile through
// certs.EnsureRenewer when it is gone, as any later command does on a
// host), renews the certificates and runs recovery.RunAuto on it. RunAuto
// decides (recovery.Decide: quorum lost everywhere by the agents' own
// reports, for the whole grace period; a pod whose volume was deleted
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
// Invariant: one automatic recovery loop per directory, the coordinator
// process's (its certrenew.lock admits one; the operator runs none of its
// own, which would race it for recover.lock every round).

// recoveryReports remembers, per resource, what of the recorded automatic
// recovery was turned into Events.
type recoveryReports struct {
	// mu guards seen.
	mu sync.Mutex
	// seen: resource key -> what was last reported, guarded by mu.
	seen map[string]recoverySeen
}

type recoverySeen struct {
	lostSince time.Time
	started   time.Time
	result    string
}

func (a *recoveryReports) forget(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.seen, key)
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

// recovery keeps the coordinator process of the started cluster c of ec
// running (it runs the automatic recovery) and reports what the recovery
// recorded since the last reconcile.
func (r *Reconciler) recovery(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster) {
	log := logf.FromContext(ctx)
	c.Progress = progress.Func(func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) })
	if started, err := certs.EnsureRenewer(ctx, c, r.Config.StewardBinary); err != nil {
		r.event(ec, corev1.EventTypeWarning, "CoordinatorNotRunning", "Recover", "the cluster's certificate renewal and automatic recovery process did not start: %v", err)
	} else if started {
		r.event(ec, corev1.EventTypeNormal, "CoordinatorStarted", "Recover", "started the cluster's certificate renewal and automatic recovery process (certs renew --watch)")
	}
	st, err := status.ReadAutoRecovery(c.Dir)
	if err != nil {
		log.Error(err, "read the automatic recovery's state")
		return
	}
	key := ec.Namespace + "/" + ec.Name
	r.reports.mu.Lock()
	if r.reports.seen == nil {
		r.reports.seen = map[string]recoverySeen{}
	}
	ch, now := recoveryChanges(st, r.reports.seen[key])
	r.reports.seen[key] = now
	r.reports.mu.Unlock()
	for _, e := range ch.events {
		r.event(ec, e.typ, e.reason, "Recover", "%s", e.msg)
	}
	if ch.op != nil {
		r.setOp(ec, "Recover", ch.op.state, ch.op.desc)
	}
}

// ManualRecoveryAdvice is what the Ready condition adds while quorum is
// lost and spec.recovery.mode is manual: the operator does nothing, and
// the recovery is run in its pod on the resource's Steward directory (the
// condition is shown by kubectl, which cannot add advice of its own).
func ManualRecoveryAdvice(dir string) string {
	return fmt.Sprintf("; spec.recovery.mode is manual, so the operator does not recover: run the recovery in the operator's pod (kubectl exec: its steward binary's recover --dir %s), or set spec.recovery.mode to auto", dir)
}

// VolumeRecoveryAdvice is ManualRecoveryAdvice for a cluster whose
// backups are on the claim spec.backup.volume names, which the operator
// cannot read (backupvolume.go): a recovery run by the operator would not
// see the newest backups.
func VolumeRecoveryAdvice(claim string) string {
	return fmt.Sprintf("; the backups are on PersistentVolumeClaim %s, which the operator cannot read, so it does not recover: members whose pods come back with their volumes re-form the cluster by themselves; otherwise copy the backup directory of the claim into an S3 bucket and restore it into a new EtcdCluster (spec.restoreFrom.s3)", claim)
}
