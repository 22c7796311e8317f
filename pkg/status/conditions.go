package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/robfig/cron/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BackupCondition reports the backups: with continuous backups on, from
// the loop's status (fresh, and no error since the last upload); otherwise
// from the newest full backup. Without any backup it is Unknown.
func BackupCondition(ctx context.Context, c *cluster.Cluster, now time.Time) Condition {
	return backupCondition(ctx, c, now, 0)
}

// backupCondition is BackupCondition; liveRevision, when known, is the
// cluster's newest revision: a loop that claims more is not believed.
func backupCondition(ctx context.Context, c *cluster.Cluster, now time.Time, liveRevision int64) (cond Condition) {
	cond = Condition{Type: CondBackupReady, Status: "Unknown", Reason: "NoBackups",
		Message: "no backup has been taken for this cluster"}
	if c.Spec == nil {
		return cond
	}
	if c.Spec.Backup.Continuous {
		bs, ok := backup.PickLoopStatus(c.LoopStatuses(ctx))
		if ok && liveRevision > 0 && bs.NextRevision-1 > liveRevision {
			liveRevision = refreshRevision(ctx, c, liveRevision)
		}
		switch {
		case !ok:
			cond.Reason, cond.Message = "BackupNotStarted", "continuous backups are on but the backup loop has not reported yet"
		case now.Sub(bs.UpdatedAt) > 30*time.Second:
			cond.Status, cond.Reason = "False", "BackupNotRunning"
			cond.Message = fmt.Sprintf("the backup loop last reported %s ago (agent %s)", now.Sub(bs.UpdatedAt).Round(time.Second), bs.Agent)
		case bs.LastError != "":
			cond.Status, cond.Reason = "False", "IncrementalBackupFailed"
			cond.Message = bs.LastError
		case liveRevision > 0 && bs.NextRevision-1 > liveRevision:
			cond.Status, cond.Reason = "False", "BackupAheadOfCluster"
			cond.Message = fmt.Sprintf("agent %s claims revisions up to %d stored, but the cluster is at revision %d: new writes are not being backed up", bs.Agent, bs.NextRevision-1, liveRevision)
		case bs.Recording && bs.BehindRevision > bs.NextRevision-1:
			cond.Status, cond.Reason = "False", "IncrementalBackupLagging"
			cond.Message = fmt.Sprintf("agent %s has stored revisions up to %d, but the cluster reached revision %d more than 6 s before: writes are not being backed up in time", bs.Agent, bs.NextRevision-1, bs.BehindRevision)
		case fullOverdue(c.Spec.Backup.FullSchedule, bs.LastFull, now):
			cond.Status, cond.Reason = "False", "FullBackupOverdue"
			cond.Message = fmt.Sprintf("the last full snapshot is %s old: two scheduled ones (%q) were missed", now.Sub(bs.LastFull).Round(time.Second), c.Spec.Backup.FullSchedule)
		case bs.Recording:
			cond.Status, cond.Reason = "True", "IncrementalBackupSucceeded"
			cond.Message = recordingMessage(bs, liveRevision, now)
		default:
			cond.Reason, cond.Message = "BackupNotStarted", "the backup loop runs but is not recording yet"
		}
		if ok && len(bs.Ignored) > 0 {
			cond.Message += fmt.Sprintf("; ignored %d untrusted manifests in the backup store: %s", len(bs.Ignored), strings.Join(bs.Ignored, "; "))
		}
		return cond
	}
	if c.Spec.Backup.S3 == nil {
		if _, err := os.Stat(c.Spec.BackupStoreDir(c.Dir)); err != nil {
			return cond
		}
	}
	store, err := c.BackupStore(ctx)
	if err != nil {
		cond.Reason, cond.Message = "BackupStoreUnreadable", err.Error()
		return cond
	}
	l, err := c.Backups(ctx, store, false)
	if err != nil {
		cond.Reason, cond.Message = "BackupStoreUnreadable", err.Error()
		return cond
	}
	var ignored []string
	for _, i := range l.Ignored {
		ignored = append(ignored, i.String())
	}
	defer func() {
		if len(ignored) > 0 {
			cond.Message += fmt.Sprintf("; ignored %d untrusted manifests in the backup store: %s", len(ignored), strings.Join(ignored, "; "))
		}
	}()
	ms := l.Backups
	if n := len(ms); n > 0 && liveRevision > 0 && ms[n-1].EndRevision > liveRevision {
		liveRevision = refreshRevision(ctx, c, liveRevision)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if m.Kind != backup.KindFull {
			continue
		}
		if liveRevision > 0 && m.EndRevision > liveRevision || m.CreatedAt.After(now.Add(time.Minute)) {
			ignored = append(ignored, fmt.Sprintf("%s: revision %d or time %s is ahead of the cluster", m.ID, m.EndRevision, m.CreatedAt.Format(time.RFC3339)))
			continue
		}
		cond.Status, cond.Reason = "True", "FullBackupSucceeded"
		cond.Message = fmt.Sprintf("newest full backup %s at revision %d, %s old",
			m.ID, m.EndRevision, now.Sub(m.CreatedAt).Round(time.Second))
		return cond
	}
	return cond
}

// recordingMessage says what a recording loop has stored against where
// the cluster is now (liveRevision, 0 when unknown): the stored revision
// is the end of the last upload, so with the cluster's own beside it and
// the upload's age the message is current, not a revision long passed.
func recordingMessage(bs backup.LoopStatus, liveRevision int64, now time.Time) string {
	stored := bs.NextRevision - 1
	var msg string
	switch {
	case liveRevision > 0 && stored >= liveRevision:
		msg = fmt.Sprintf("agent %s records every change: every revision up to the cluster's %d stored", bs.Agent, liveRevision)
	case liveRevision > 0:
		msg = fmt.Sprintf("agent %s records every change: revisions up to %d stored, the cluster is at %d (revisions %d to %d are in the segment being recorded)",
			bs.Agent, stored, liveRevision, stored+1, liveRevision)
	default:
		msg = fmt.Sprintf("agent %s records every change: revisions up to %d stored", bs.Agent, stored)
	}
	if !bs.LastUpload.IsZero() {
		msg += fmt.Sprintf(", last upload %s ago", now.Sub(bs.LastUpload).Round(time.Second))
	}
	return msg
}

// fullOverdue reports whether two scheduled full snapshots were missed.
func fullOverdue(schedule string, last, now time.Time) bool {
	if last.IsZero() {
		return false
	}
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return false
	}
	return now.After(sched.Next(sched.Next(last)))
}

// conditions computes the status conditions. They carry no
// lastTransitionTime: Record stamps it from the last recorded ones.
func conditions(ctx context.Context, c *cluster.Cluster, st *Status, now time.Time) []Condition {
	quorum := st.Cluster.VotingMembers/2 + 1
	ready := Condition{Type: CondReady, Status: "True", Reason: "Quorate",
		Message: fmt.Sprintf("%d of %d voting members healthy; quorum is %d", st.HealthyVoters(), st.Cluster.VotingMembers, quorum)}
	if !st.Cluster.Quorate {
		ready.Status, ready.Reason = "False", "QuorumLost"
		ready.Message = fmt.Sprintf("no linearizable read succeeded: %d of %d voting members needed; %s",
			quorum, st.Cluster.VotingMembers, st.Unhealthy())
	}
	ready.Message += st.AutoRecovery.note(st.Cluster.Quorate)
	all := Condition{Type: CondAllMembersReady, Status: "True", Reason: "AllMembersReady",
		Message: fmt.Sprintf("all %d members healthy", len(st.Members))}
	if st.Cluster.HealthyMembers < len(st.Members) {
		all.Status, all.Reason = "False", "NotAllMembersReady"
		all.Message = st.Unhealthy()
	} else if l := learnerNames(st); len(l) > 0 {
		// A healthy learner is still catching up: it neither votes nor
		// serves linearizable reads, so clients given its endpoint get
		// "rpc not supported for learner". Not ready until promoted.
		all.Status, all.Reason = "False", "LearnerNotPromoted"
		all.Message = fmt.Sprintf("not yet promoted to voting member (still catching up): %s", strings.Join(l, ", "))
	}
	var live int64
	for _, m := range st.Members {
		if m.Healthy {
			live = max(live, m.Revision)
		}
	}
	conds := append([]Condition{ready, all, backupCondition(ctx, c, now, live)}, planConditions(c)...)
	conds = append(conds, certificatesCondition(ctx, c, now))
	if cond, ok := binariesCondition(st.Agents); ok {
		conds = append(conds, cond)
	}
	if renews(c) {
		_, cond := renewalStatus(c, now)
		conds = append(conds, cond)
	}
	return conds
}

// renews reports whether Steward renews this cluster's certificates: TLS
// is on and they are not the operator's (an attached cluster whose
// issuing Steward has not taken over).
func renews(c *cluster.Cluster) bool {
	return c.Spec != nil && !c.Spec.TLS.Disabled && !c.Spec.OperatorCerts()
}

// certificatesCondition reads the inventory and computes CertificatesReady.
func certificatesCondition(ctx context.Context, c *cluster.Cluster, now time.Time) Condition {
	inv, err := Certificates(ctx, c)
	if err != nil {
		return Condition{Type: CondCertificatesReady, Status: "Unknown", Reason: "InventoryFailed", Message: err.Error()}
	}
	return CertificatesCondition(c, inv, now)
}

// HealthyVoters counts the healthy voting members of the spec.
func (s *Status) HealthyVoters() int {
	n := 0
	for _, m := range s.Members {
		if m.Healthy && m.Role != "learner" && m.InSpec {
			n++
		}
	}
	return n
}

func learnerNames(st *Status) []string {
	var names []string
	for _, m := range st.Members {
		if m.Role == "learner" {
			names = append(names, m.Name)
		}
	}
	return names
}

func conditionsPath(c *cluster.Cluster) string {
	return filepath.Join(c.StatusDir(), "conditions.json")
}

// Record is the one place a status observation is written down, and
// only the commands that report status to an operator call it. It stamps
// each condition's lastTransitionTime from the conditions recorded last
// time in DIR/status/conditions.json (kept when the condition's status did
// not change, now when it did), records the new ones there when any
// changed, and records the etcd cluster ID seen (RecordClusterID). Both
// files are written atomically.
func Record(c *cluster.Cluster, st *Status, now time.Time) error {
	path := conditionsPath(c)
	var prev []Condition
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the recorded conditions: %w", err)
	default:
		if err := json.Unmarshal(b, &prev); err != nil {
			// The record only keeps transition times: start it afresh.
			prev = nil
		}
	}
	changed := len(prev) != len(st.Conditions)
	for i := range st.Conditions {
		cond := &st.Conditions[i]
		cond.LastTransitionTime = now.UTC().Truncate(time.Second)
		for _, p := range prev {
			if p.Type == cond.Type {
				if p.Status == cond.Status {
					cond.LastTransitionTime = p.LastTransitionTime
				} else {
					changed = true
				}
			}
		}
	}
	if changed {
		if err := os.MkdirAll(c.StatusDir(), 0o700); err != nil {
			return fmt.Errorf("record conditions: %w", err)
		}
		b, err := json.MarshalIndent(st.Conditions, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("record conditions: %w", err)
		}
	}
	if st.Cluster.ID != "" {
		return c.RecordClusterID(st.Cluster.ID)
	}
	return nil
}

// CondUpgradeInProgress is true while an upgrade or rollback plan has
// work left: running, failed (waiting for resume or abort) or
// interrupted. Each plan kind names the condition that reports it
// (PlanKinds; the types are package plan's Cond constants).
const CondUpgradeInProgress = plan.CondUpgradeInProgress

// planConditions reports the latest plan's state: one condition per type
// the plan kinds name (CondUpgradeInProgress first, always there), the
// latest plan's in the one its kind names (CondUpgradeInProgress for a
// kind no package registered), the others without a plan.
func planConditions(c *cluster.Cluster) []Condition {
	types := []string{CondUpgradeInProgress}
	for _, t := range cluster.PlanKinds.Conditions() {
		if t != CondUpgradeInProgress {
			types = append(types, t)
		}
	}
	latest := planCondition(c)
	out := make([]Condition, len(types))
	for i, t := range types {
		out[i] = Condition{Type: t, Status: "False", Reason: "NoPlan", Message: "no plan"}
		if t == CondUpgradeInProgress {
			out[i].Message = "no upgrade or rollback plan"
		}
		if latest.Type == t {
			out[i] = latest
		}
	}
	return out
}

// planCondition reports the latest plan's state in the condition its kind
// names.
func planCondition(c *cluster.Cluster) Condition {
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
	what, typ, ok := cluster.PlanKinds.Describe(p)
	if ok {
		cond.Type = typ
	}
	step := p.Current()
	switch {
	case p.State == plan.Failed:
		cond.Status, cond.Reason, cond.Fix = "True", "Failed", FixPlanFailed
		cond.Message = fmt.Sprintf("%s failed: %s; fix the cause", what, p.Error)
	case p.Active() && !st.Locked():
		cond.Status, cond.Reason, cond.Fix = "True", "Interrupted", FixPlanInterrupted
		cond.Message = fmt.Sprintf("%s was interrupted; no process runs it", what)
	case p.Active():
		cond.Status, cond.Reason = "True", "Running"
		cond.Message = what
		if step != nil {
			cond.Message += fmt.Sprintf(": step %d/%d, %s", step.Number(), len(p.Steps), step.Description)
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

// refreshRevision reads the cluster's revision now (a linearizable read),
// for a backup that claims more than known, the revision the status probes
// saw: a loop that stored revisions since those probes is not ahead of the
// cluster. It returns known when the read fails.
func refreshRevision(ctx context.Context, c *cluster.Cluster, known int64) int64 {
	cli, err := c.Client()
	if err != nil {
		return known
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := cli.Get(rctx, "/steward/revision", clientv3.WithCountOnly())
	if err != nil {
		return known
	}
	return max(known, resp.Header.Revision)
}
