package carotate

// The way back from a CA rotation stopped (aborted, failed or interrupted)
// before its drop step: a plan of its own, kind ca-rotation-rollback,
// resumable and abortable like the rotation:
//
//  1. leaves: the server, peer and agent leaves issued by the old CA again
//     (NAME.crt.prev put back when it still serves, else reissued by the
//     old CA, ca.key, with the same key), waited for until the members
//     serve them; on joined hosts their server, peer, agent and client
//     leaves likewise through the agents' API;
//  2. clients: the admin client certificate and the issued client
//     certificates likewise;
//  3. trust: ca.crt becomes the old CA alone, here and on every host
//     (PUT /v1/ca, which the agents accept once their leaves are the old
//     CA's again);
//  4. retire: ca-cross.crt, ca-next.key and ca-next.crt moved aside as
//     NAME.aborted-SERIAL, after which renewals and issue-client work
//     again.
//
// No member restarts: before the drop step no member was restarted by the
// rotation, so each trusts what it trusted at its start (the old CA, or
// old + new), and the old CA's leaves verify under both.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
)

// Step kinds of a CA rotation rollback plan.
const (
	StepRollbackLeaves  = "ca-rollback-leaves"
	StepRollbackClients = "ca-rollback-clients"
	StepTrustOld        = "ca-trust-old"
	StepRetireNext      = "ca-retire-next"
)

// Refusals of a CA rotation rollback; nothing is changed.
var (
	// ErrNoRotationToRollBack: the latest plan is not a CA rotation (or
	// its rollback).
	ErrNoRotationToRollBack = errors.New("no CA rotation to roll back")
	// ErrRotationDone: the latest CA rotation finished; its new CA is the CA.
	ErrRotationDone = errors.New("the CA rotation is done")
	// ErrOldCADropped: the rotation's drop step began; the old CA is no
	// longer ca.key.
	ErrOldCADropped = errors.New("the old CA was dropped")
	// ErrRolledBack: the latest CA rotation was rolled back already. It
	// is an ErrNoRotationToRollBack, of the same text.
	ErrRolledBack = fmt.Errorf("%w", ErrNoRotationToRollBack)
	// ErrPlanRunning: a process runs a plan (plan.ErrLocked, of the same
	// text); stopping it is the way to roll a CA rotation back.
	ErrPlanRunning = fmt.Errorf("%w", plan.ErrLocked)
)

// RollbackOf checks that latest, the latest plan, is a CA rotation that can
// be rolled back: stopped (aborted, failed, or interrupted: pending or
// running with no process running it, which the caller checks) before its
// drop step began. Otherwise it returns the refusal, one line saying why:
// ErrNoRotationToRollBack (ErrRolledBack when it was rolled back
// already), ErrRotationDone or ErrOldCADropped, for the command to say what
// to do.
func RollbackOf(latest *plan.Plan) error {
	switch {
	case latest == nil || (latest.Kind != plan.KindCARotation && latest.Kind != plan.KindCARotationRollback):
		what := "there is no plan"
		if latest != nil {
			what = fmt.Sprintf("the latest plan is %s plan %s (%s)", latest.Kind, latest.ID, latest.State)
		}
		return fmt.Errorf("%w: %s", ErrNoRotationToRollBack, what)
	case latest.Kind == plan.KindCARotationRollback && latest.Active():
		return &plan.ActiveError{Plan: latest, Name: "CA rotation rollback " + latest.ID}
	case latest.Kind == plan.KindCARotationRollback:
		return fmt.Errorf("%w: the latest plan is CA rotation rollback %s (%s)", ErrNoRotationToRollBack, latest.ID, latest.State)
	case latest.State == plan.Done:
		return fmt.Errorf("%w (plan %s): its new CA is the CA", ErrRotationDone, latest.ID)
	case latest.State == plan.RolledBack:
		return fmt.Errorf("%w: CA rotation %s was rolled back already", ErrRolledBack, latest.ID)
	}
	for _, s := range latest.Steps {
		if s.Kind == StepDrop && s.State != plan.Pending {
			return fmt.Errorf("%w at step %d", ErrOldCADropped, s.Number())
		}
	}
	return nil
}

// NewRollbackPlan builds the rollback plan of CA rotation of (not saved).
func NewRollbackPlan(c *cluster.Cluster, of *plan.Plan, now time.Time) (*plan.Plan, error) {
	if c.Spec.TLS.Disabled {
		return nil, ErrTLSDisabled
	}
	if err := RollbackOf(of); err != nil {
		return nil, err
	}
	p := &plan.Plan{ID: plan.NewID(plan.KindCARotationRollback, now), Kind: plan.KindCARotationRollback,
		State: plan.Pending, CreatedAt: now.UTC(), Of: of.ID, HealthTimeoutSeconds: of.HealthTimeoutSeconds}
	// The CA the rollback goes back to: the one the rotation replaced.
	if v, err := PayloadOf(of); err == nil && v.OldCA != "" {
		if err := plan.SetPayload(p, v); err != nil {
			return nil, err
		}
	}
	add := func(kind, desc string) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: kind, Description: desc, State: plan.Pending})
	}
	onHosts, hostClients := "", ""
	if hs := hostset.Remote(c.Spec).Names(); len(hs) > 0 {
		onHosts = " here and on the hosts " + strings.Join(hs, ", ")
		hostClients = " (on the hosts their client certificates too)"
	}
	add(StepRollbackLeaves, "issue the server, peer and agent certificates from the old CA again"+onHosts+hostClients+", until they are served")
	add(StepRollbackClients, "issue the admin and the issued client certificates from the old CA again")
	add(StepTrustOld, "trust the old CA alone (ca.crt"+onHosts+")")
	add(StepRetireNext, "move the new CA aside (ca-next.*, ca-cross.crt as *"+pki.AbortedSuffix+"SERIAL)")
	return p, nil
}

// Rollback plans the way back from the latest CA rotation (RollbackOf; the
// one an aborted rollback, the latest plan, rolled back), saves the plan
// and runs it. The rotation, when still active (failed or
// interrupted), is marked aborted first, superseded by the rollback; once
// the rollback is done it is marked rolled back. While a process runs a
// plan it is refused (ErrPlanRunning).
func Rollback(ctx context.Context, c *cluster.Cluster) (*plan.Plan, error) {
	store := c.Plans()
	latest, err := plan.Admit(store, admitRollback)
	if err != nil {
		return nil, err
	}
	// An aborted rollback is planned again, from where it left the files:
	// its steps are idempotent.
	if latest != nil && latest.Kind == plan.KindCARotationRollback && latest.State == plan.Aborted && latest.Of != "" {
		if latest, err = store.Get(latest.Of); err != nil {
			return nil, fmt.Errorf("the CA rotation the aborted rollback rolled back: %w", err)
		}
	}
	p, err := NewRollbackPlan(c, latest, time.Now())
	if err != nil {
		return nil, err
	}
	if latest.Active() {
		latest.State, latest.Error = plan.Aborted, "superseded by CA rotation rollback "+p.ID
		if err := store.Save(ctx, latest); err != nil {
			return nil, err
		}
	}
	if err := store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, RunRollback(ctx, c, p.ID)
}

// RunRollback runs the CA rotation rollback plan id from its first step
// that is not done; once it is done, the rotation it rolled back is marked
// rolled back.
func RunRollback(ctx context.Context, c *cluster.Cluster, id string) error {
	store := c.Plans()
	if err := plan.Run(ctx, store, id, &RollbackExecutor{C: c, Progress: c.Progress}, c.Progress); err != nil {
		return err
	}
	p, err := store.Get(id)
	if err != nil || p.State != plan.Done || p.Of == "" {
		return err
	}
	of, err := store.Get(p.Of)
	if err != nil || of.State == plan.RolledBack {
		return err
	}
	of.State, of.Error = plan.RolledBack, "rolled back by "+p.ID
	for i := range of.Steps {
		if of.Steps[i].State == plan.Done {
			of.Steps[i].State = plan.RolledBack
		}
	}
	if err := store.Save(ctx, of); err != nil {
		return err
	}
	// Save made the rotation the latest plan; the rollback is.
	return store.Save(ctx, p)
}

// RollbackExecutor runs the steps of a CA rotation rollback plan.
type RollbackExecutor struct {
	C *cluster.Cluster
	// Progress receives a line per notable action (may be nil).
	Progress progress.Func
	// HealthTimeout bounds the wait for the leaves served (default 2
	// minutes, or the plan's HealthTimeoutSeconds).
	HealthTimeout time.Duration
}

// Execute implements plan.Executor.
func (e *RollbackExecutor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	wait := defaultWait
	if e.HealthTimeout > 0 {
		wait = e.HealthTimeout
	}
	c, wait, err := e.C.ForStep(p, wait)
	if err != nil {
		return err
	}
	e.C = c
	// Every step writes the certificate directory: under the lock
	// renewals hold, as the rotation's file steps.
	lock, err := certs.Lock(ctx, c, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("CA rotation rollback: %w", err)
	}
	defer lock.Release()
	dir := c.CertDir()
	switch s.Kind {
	case StepRollbackLeaves:
		if _, err := e.rollback(dir, serverLeaves); err != nil {
			return err
		}
		// What this run wrote, and what a killed run wrote and did not
		// see served: each waited for, then its previous copy dropped.
		var rs []pki.Renewal
		if names := e.present(dir, serverLeaves); len(names) > 0 {
			if rs, err = certs.Unsettled(dir, names); err != nil {
				return fmt.Errorf("CA rotation rollback: %w", err)
			}
		}
		if err := certs.WaitServed(ctx, c, rs, wait); err != nil {
			return fmt.Errorf("CA rotation rollback: %w", err)
		}
		for _, r := range rs {
			if err := pki.ForgetPrevious(r); err != nil {
				return fmt.Errorf("CA rotation rollback: %w", err)
			}
		}
		hrs, err := certs.RollbackHostLeaves(ctx, c, wait)
		for _, r := range hrs {
			e.Progress.Say("  host %s: %s issued by the old CA again (serial %s)", r.Host, r.Name, r.NewSerial)
		}
		return err
	case StepRollbackClients:
		names, err := pki.Names(dir)
		if err != nil {
			return err
		}
		_, err = e.rollback(dir, clientLeaves(names))
		return err
	case StepTrustOld:
		if err := certs.RollbackTrustOld(dir); err != nil {
			return err
		}
		return certs.PushTrustBundle(ctx, c)
	case StepRetireNext:
		return certs.RollbackRetire(dir)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// present returns the names of want that are leaves of dir.
func (e *RollbackExecutor) present(dir string, want []string) []string {
	have, _ := pki.Names(dir)
	var names []string
	for _, n := range want {
		if slices.Contains(have, n) {
			names = append(names, n)
		}
	}
	return names
}

// rollback issues the named leaves that exist in dir from the old CA again.
func (e *RollbackExecutor) rollback(dir string, want []string) ([]pki.Renewal, error) {
	if _, err := pki.Names(dir); err != nil {
		return nil, err
	}
	names := e.present(dir, want)
	if len(names) == 0 {
		return nil, nil
	}
	rs, err := certs.RollbackLeaves(dir, e.C.Validity(), names, time.Now())
	for _, r := range rs {
		e.Progress.Say("  %s issued by the old CA again (serial %s)", r.Name, r.NewSerial)
	}
	return rs, err
}
