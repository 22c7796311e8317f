package operator

// spec.version: upgrades and rollbacks of an EtcdCluster are the hosts'
// plans (pkg/upgrade), persisted in the resource's Steward directory
// (plans/) and carried out member by member through the pods' agents:
// each member's etcd child is swapped to the new version from the image's
// binary store, in place, without restarting its pod; followers first,
// the leader last after leadership moved away. Setting spec.version back
// to the version the last upgrade started from is that upgrade's rollback
// (etcd's online downgrade, every write kept). A version the catalogue
// does not know, or a step the rules refuse, is refused before anything
// is saved: UpgradeInProgress=False with reason UpgradeRefused and the
// refusal as its message. A plan the operator was carrying out when it
// stopped (its pod deleted, its node lost) is resumed by the next
// operator's first reconcile: the plan engine's steps are idempotent.
//
// Invariants (enforced here):
//   - one version plan per resource runs at a time, in a goroutine of the
//     resource's run (versionRunner.running, lifecycle.go), never inside
//     Reconcile, which keeps reporting status while it runs; it honours
//     the run's context: it stops when the resource is deleted or the
//     operator stops, and a plan so interrupted is left running on disk
//     (markInterrupted) for the next leader to resume;
//   - a plan locked by another process (its store's lock) is never
//     resumed: only one runner per plan;
//   - a refusal is kept per resource generation and version and retried
//     after refusalRetry (a member that was unhealthy may have recovered),
//     with one Event per distinct refusal.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// Version actions (VersionDecision.Action).
const (
	VersionNone     = ""
	VersionUpgrade  = "Upgrade"
	VersionRollback = "Rollback"
	// VersionResume continues a version plan no process runs (the
	// operator that ran it stopped).
	VersionResume = "Resume"
	// VersionWait: a version plan is being carried out by a process
	// holding its store's lock.
	VersionWait = "Wait"
)

// refusalRetry is how long a refused version change waits before it is
// tried again for the same generation.
const refusalRetry = time.Minute

// VersionDecision is what to do about spec.version.
type VersionDecision struct {
	Action string
	// To is the target of an upgrade or a rollback.
	To string
	// Plan is the plan resumed or waited for.
	Plan *plan.Plan
}

// isVersionPlan: an upgrade or a rollback plan.
func isVersionPlan(p *plan.Plan) bool {
	return p != nil && (p.Kind == plan.KindUpgrade || p.Kind == plan.KindRollback)
}

// DecideVersion decides what spec.version asks for. want is spec.version
// (empty: whatever runs), running the one version every member runs
// (empty while they differ), latest the cluster's latest plan (nil: none),
// lastUp the newest upgrade plan not rolled back (nil: none), locked
// whether a process holds the plan store's lock.
func DecideVersion(want, running string, latest, lastUp *plan.Plan, locked bool) (VersionDecision, error) {
	if isVersionPlan(latest) && (latest.State == plan.Running || latest.State == plan.Pending) {
		if locked {
			return VersionDecision{Action: VersionWait, Plan: latest}, nil
		}
		return VersionDecision{Action: VersionResume, Plan: latest}, nil
	}
	if want == "" {
		return VersionDecision{}, nil
	}
	w, err := binaries.NormalizeVersion(want)
	if err != nil {
		return VersionDecision{}, fmt.Errorf("spec.version %q: %w", want, err)
	}
	if lastUp != nil {
		if v, err := upgrade.PayloadOf(lastUp); err == nil && v.From == w && (running != w || lastUp.State == plan.Failed) {
			return VersionDecision{Action: VersionRollback, To: w}, nil
		}
	}
	if running == w {
		return VersionDecision{}, nil
	}
	// A version plan to this version that failed is the status's to
	// report (UpgradeInProgress, reason Failed): a new plan would only be
	// refused while it stands. Setting spec.version back rolls it back
	// (above); the user may also resume or abort it.
	if isVersionPlan(latest) && latest.State == plan.Failed {
		if v, err := upgrade.PayloadOf(latest); err == nil && v.To == w {
			return VersionDecision{}, nil
		}
	}
	return VersionDecision{Action: VersionUpgrade, To: w}, nil
}

// lastUpgrade is the newest upgrade plan not rolled back (nil: none).
func lastUpgrade(store *plan.Store) (*plan.Plan, error) {
	ps, err := store.List()
	if err != nil {
		return nil, err
	}
	var last *plan.Plan
	for _, p := range ps {
		if p.Kind == plan.KindUpgrade && p.State != plan.RolledBack && p.State != plan.Aborted && (last == nil || p.CreatedAt.After(last.CreatedAt)) {
			last = p
		}
	}
	return last, nil
}

// runningVersion is the one version every member runs ("" while they
// differ or none is known).
func runningVersion(st *status.Status) string {
	v := ""
	for _, m := range st.Members {
		if m.Version == "" || (v != "" && m.Version != v) {
			return ""
		}
		v = m.Version
	}
	return v
}

// versionUnknown reports whether a member's version is unknown (it did not
// answer the status).
func versionUnknown(st *status.Status) bool {
	for _, m := range st.Members {
		if m.Version == "" {
			return true
		}
	}
	return false
}

// versionRunner runs the version plans of the resources, one at a time
// per resource, in goroutines of the operator.
type versionRunner struct {
	// mu guards running and refused.
	mu sync.Mutex
	// running is the resources (NAMESPACE/NAME) whose plan a goroutine
	// runs, with what it does.
	running map[string]string
	// refused is the newest refusal per resource.
	refused map[string]versionRefusal
}

type versionRefusal struct {
	generation int64
	want       string
	at         time.Time
	msg        string
}

func (v *versionRunner) busy(key string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	what, ok := v.running[key]
	return what, ok
}

// claim marks key running; false when it already was.
func (v *versionRunner) claim(key, what string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.running == nil {
		v.running = map[string]string{}
	}
	if _, ok := v.running[key]; ok {
		return false
	}
	v.running[key] = what
	return true
}

func (v *versionRunner) release(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.running, key)
}

func (v *versionRunner) refusal(key string) (versionRefusal, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.refused[key]
	return r, ok
}

// versionPlanBusy reports whether a version plan of the resource key runs
// or must be resumed first, and which: its goroutine runs (busy), a
// process holds the plan store's lock, or the latest plan is an upgrade
// or rollback still Pending or Running (an operator restarted mid-plan:
// reconcileVersion resumes it). A Failed plan does not hold membership
// back: it waits for the user, who may need to scale to fix it.
func (r *Reconciler) versionPlanBusy(key string, c *cluster.Cluster) (string, bool) {
	what, running := r.versions.busy(key)
	store := c.Plans()
	latest, err := store.Latest()
	if err != nil {
		latest = nil // none, or unreadable: reconcileVersion reports it
	}
	return versionPlanHolds(what, running, store.Locked(), latest)
}

// versionPlanHolds is versionPlanBusy's decision, pure.
func versionPlanHolds(what string, running, locked bool, latest *plan.Plan) (string, bool) {
	switch {
	case running:
		return "the version plan (" + what + ")", true
	case isVersionPlan(latest) && (latest.State == plan.Pending || latest.State == plan.Running):
		return fmt.Sprintf("%s plan %s", latest.Kind, latest.ID), true
	case locked:
		return "a plan (its store is locked)", true
	}
	return "", false
}

// refuse records a refusal; it reports whether its message is new.
func (v *versionRunner) refuse(key string, r versionRefusal) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refused == nil {
		v.refused = map[string]versionRefusal{}
	}
	prev, ok := v.refused[key]
	v.refused[key] = r
	return !ok || prev.msg != r.msg || prev.want != r.want
}

func (v *versionRunner) clearRefusal(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.refused, key)
}

// refusedCondition is UpgradeInProgress for a refused version change.
func refusedCondition(msg string) *metav1.Condition {
	return &metav1.Condition{Type: v1alpha1.ConditionUpgradeInProgress, Status: metav1.ConditionFalse,
		Reason: "UpgradeRefused", Message: msg}
}

// reconcileVersion starts, resumes or reports the version plan spec.version
// asks for. It returns the UpgradeInProgress condition to report in place
// of the cluster status's (nil: the status's, which names the plan).
func (r *Reconciler) reconcileVersion(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, st *status.Status, run *clusterRun) *metav1.Condition {
	key := ec.Namespace + "/" + ec.Name
	if _, ok := r.versions.busy(key); ok {
		return nil
	}
	store := c.Plans()
	latest, err := store.Latest()
	if err != nil && !errors.Is(err, plan.ErrNoPlan) {
		return &metav1.Condition{Type: v1alpha1.ConditionUpgradeInProgress, Status: metav1.ConditionUnknown, Reason: "PlanUnreadable", Message: err.Error()}
	}
	lastUp, err := lastUpgrade(store)
	if err != nil {
		return &metav1.Condition{Type: v1alpha1.ConditionUpgradeInProgress, Status: metav1.ConditionUnknown, Reason: "PlanUnreadable", Message: err.Error()}
	}
	running := ""
	if st != nil {
		running = runningVersion(st)
	}
	d, err := DecideVersion(ec.Spec.Version, running, latest, lastUp, store.Locked())
	if err != nil {
		return r.refused(ec, key, err.Error())
	}
	switch d.Action {
	case VersionNone, VersionWait:
		if d.Action == VersionNone {
			r.versions.clearRefusal(key)
		}
		return nil
	case VersionResume:
		r.startVersion(ctx, ec, run, key, d)
		return nil
	}
	if st == nil || versionUnknown(st) {
		// The status is unknown, or a member's version is (its pod
		// restarting, its node drained): running is "" then, and an
		// upgrade to what already runs would be planned and refused.
		// Decide once every member answers.
		return nil
	}
	if rf, ok := r.versions.refusal(key); ok && rf.generation == ec.Generation && rf.want == d.To && time.Since(rf.at) < refusalRetry {
		return refusedCondition(rf.msg)
	}
	r.startVersion(ctx, ec, run, key, d)
	return nil
}

func (r *Reconciler) refused(ec *v1alpha1.EtcdCluster, key, msg string) *metav1.Condition {
	if r.versions.refuse(key, versionRefusal{generation: ec.Generation, want: ec.Spec.Version, at: time.Now(), msg: msg}) {
		r.event(ec, corev1.EventTypeWarning, "UpgradeRefused", "Upgrade", "spec.version %s refused, nothing changed: %s", ec.Spec.Version, msg)
	}
	return refusedCondition(msg)
}

// startVersion runs d in a goroutine of the resource's run (lifecycle.go):
// the plan takes minutes, so it outlives the reconcile, but it ends with
// the run: when the resource is deleted, or when the operator stops (its
// context), in which case the plan is left resumable (markInterrupted) for
// the next leader.
func (r *Reconciler) startVersion(ctx context.Context, ec *v1alpha1.EtcdCluster, run *clusterRun, key string, d VersionDecision) {
	if !r.versions.claim(key, d.Action) {
		return
	}
	ec = ec.DeepCopy()
	dir := StateDir(r.Config.StateDir, ec)
	log := logf.FromContext(ctx).WithValues("version", d.Action)
	started := run.Go(&r.life, func(gctx context.Context) {
		defer r.versions.release(key)
		c, err := cluster.Open(dir)
		if err != nil {
			log.Error(err, "open the Steward directory")
			return
		}
		typ := d.Action
		c.Progress = r.planEvents(ec, c, &typ, func(msg string) { log.Info(msg) })
		var p *plan.Plan
		switch d.Action {
		case VersionResume:
			p = d.Plan
			typ = opType(p)
			r.event(ec, corev1.EventTypeNormal, "PlanResumed", typ, "resuming %s plan %s (%s), which no process was carrying out", p.Kind, p.ID, p.State)
			r.setPlanOp(ec, typ, "Running", fmt.Sprintf("plan %s resumed", p.ID), p.ID)
			err = cluster.PlanKinds.Resume(gctx, c, p)
		case VersionUpgrade:
			r.setOp(ec, typ, "Running", fmt.Sprintf("planning the upgrade to %s", d.To))
			p, err = upgrade.Apply(gctx, c, upgrade.Options{To: d.To})
		case VersionRollback:
			r.setOp(ec, typ, "Running", fmt.Sprintf("planning the rollback to %s", d.To))
			p, err = upgrade.Rollback(gctx, c, upgrade.Options{})
		}
		if err != nil && gctx.Err() != nil {
			// Stopped, not failed: the resource was deleted, or the
			// operator stops (then the plan stays resumable).
			if p != nil && !run.gone.Load() {
				if merr := markInterrupted(c, p.ID); merr != nil {
					log.Error(merr, "leave the interrupted plan resumable", "plan", p.ID)
				}
			}
			log.Info("version plan stopped with the operator or the resource", "error", err.Error())
			return
		}
		if p == nil && err != nil {
			// Refused before the plan was saved: nothing changed.
			r.refused(ec, key, err.Error())
			r.setOp(ec, typ, "Failed", "refused, nothing changed: "+err.Error())
			return
		}
		r.versions.clearRefusal(key)
		if err != nil {
			log.Error(err, "version plan", "plan", p.ID)
			r.event(ec, corev1.EventTypeWarning, "PlanFailed", typ, "plan %s failed: %v", p.ID, err)
			r.setPlanOp(ec, typ, "Failed", fmt.Sprintf("plan %s failed: %v", p.ID, err), p.ID)
			return
		}
		what := "etcd " + d.To
		if v, err := upgrade.PayloadOf(p); err == nil {
			what = fmt.Sprintf("etcd %s to %s", v.From, v.To)
		}
		r.event(ec, corev1.EventTypeNormal, "PlanDone", typ, "plan %s done: %s", p.ID, what)
		r.setPlanOp(ec, typ, "Succeeded", fmt.Sprintf("plan %s: %s", p.ID, what), p.ID)
	})
	if !started {
		r.versions.release(key)
	}
}

// markInterrupted leaves plan id of c as a kill would have left it,
// running, when the step the operator's stop cut short recorded the plan
// as failed: the next leader's first reconcile resumes it (DecideVersion:
// VersionResume), and the step is run again (the plan engine's steps are
// idempotent).
func markInterrupted(c *cluster.Cluster, id string) error {
	st := c.Plans()
	p, err := st.Get(id)
	if err != nil {
		return err
	}
	if p.State != plan.Failed {
		return nil
	}
	p.State, p.Error = plan.Running, ""
	for i := range p.Steps {
		if s := &p.Steps[i]; s.State == plan.Failed {
			s.State, s.Error = plan.Running, "interrupted: the operator stopped during this step"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return st.Save(ctx, p)
}

// setPlanOp is setOp naming the plan (lastOperation.plan) when known.
func (r *Reconciler) setPlanOp(ec *v1alpha1.EtcdCluster, typ, state, desc, id string) {
	r.setOp(ec, typ, state, desc)
	if id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if op := r.ops[ec.Namespace+"/"+ec.Name]; op != nil {
		op.Plan = id
	}
}

// opType is lastOperation's type of a version plan.
func opType(p *plan.Plan) string {
	if p.Kind == plan.KindRollback {
		return VersionRollback
	}
	return VersionUpgrade
}

// planEvents turns the plan engine's progress into the log and an Event
// per plan step (the lines "step N/M: ..." and "plan ID ..."). Once the
// plan is saved its first line names it: lastOperation then carries the
// plan's ID.
func (r *Reconciler) planEvents(ec *v1alpha1.EtcdCluster, c *cluster.Cluster, typ *string, logf func(string)) progress.Func {
	var mu sync.Mutex // guards id: the executor may report from several goroutines
	id := ""
	return progress.Func(func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logf(msg)
		switch {
		case strings.HasPrefix(msg, "step "):
			mu.Lock()
			if id == "" {
				if p, err := c.Plans().Latest(); err == nil && isVersionPlan(p) {
					id = p.ID
				}
			}
			id := id
			mu.Unlock()
			r.event(ec, corev1.EventTypeNormal, "PlanStep", *typ, "plan %s: %s", id, msg)
			r.setPlanOp(ec, *typ, "Running", fmt.Sprintf("plan %s: %s", id, msg), id)
		case strings.HasPrefix(msg, "plan "):
			r.event(ec, corev1.EventTypeNormal, "Plan", *typ, "%s", msg)
		case strings.HasPrefix(msg, "warning: "):
			r.event(ec, corev1.EventTypeWarning, "PlanWarning", *typ, "%s", msg)
		}
	})
}
