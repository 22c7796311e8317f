package upgrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// Apply plans an upgrade to o.To, saves the plan and runs it.
func Apply(ctx context.Context, c *cluster.Cluster, o Options) (*plan.Plan, error) {
	if err := requireNoActivePlan(c.Plans()); err != nil {
		return nil, err
	}
	p, err := NewPlan(ctx, c, o)
	if err != nil {
		return nil, err
	}
	if err := preflightFirstHop(ctx, c, p); err != nil {
		return nil, err
	}
	return p, start(ctx, c, p)
}

// preflightFirstHop runs the first hop's checks before the plan is saved,
// so a refused plan leaves no trace. The plan's preflight steps run them
// again when they execute.
func preflightFirstHop(ctx context.Context, c *cluster.Cluster, p *plan.Plan) error {
	for _, s := range p.Steps {
		if s.Kind != StepPreflight {
			continue
		}
		checks, err := Preflight(ctx, c, p.From, s.Version)
		if err != nil {
			return err
		}
		warnings, err := Refusal(checks, p.Force)
		for _, w := range warnings {
			c.Progress.Say("warning: %s", w)
		}
		return err
	}
	return nil
}

// Rollback plans the way back to the version before the last upgrade plan,
// saves it and runs it. An upgrade plan that stopped halfway (failed or
// interrupted) is superseded: it is marked aborted first.
func Rollback(ctx context.Context, c *cluster.Cluster, o Options) (*plan.Plan, error) {
	store := c.Plans()
	if store.Locked() {
		return nil, plan.ErrLocked
	}
	latest, err := store.Latest()
	if err != nil {
		return nil, err
	}
	if (latest.Kind == plan.KindCARotation || latest.Kind == plan.KindCertsTakeOver) && latest.Active() {
		return nil, plan.RefuseActive(latest)
	}
	if latest.Kind == plan.KindRollback && latest.Active() {
		return nil, &plan.ActiveError{Plan: latest, Name: "rollback " + latest.ID}
	}
	p, up, err := NewRollback(ctx, c, o)
	if err != nil {
		return nil, err
	}
	if err := preflightFirstHop(ctx, c, p); err != nil {
		return nil, err
	}
	if up.Active() {
		up.State, up.Error = plan.Aborted, "superseded by rollback "+p.ID
		if err := store.Save(ctx, up); err != nil {
			return nil, err
		}
	}
	return p, start(ctx, c, p)
}

// Resume runs the latest plan from its first step that is not done.
func Resume(ctx context.Context, c *cluster.Cluster) (*plan.Plan, error) {
	p, err := c.Plans().Latest()
	if err != nil {
		return nil, err
	}
	if !p.Active() {
		return p, fmt.Errorf("plan %s is %s: nothing to resume", p.ID, p.State)
	}
	if p.Kind != plan.KindUpgrade && p.Kind != plan.KindRollback {
		return p, fmt.Errorf("plan %s is a %s plan, not an upgrade or rollback", p.ID, p.Kind)
	}
	return p, run(ctx, c, p.ID)
}

// Abort stops the latest plan: at once when no process runs it, else after
// the step in progress.
func Abort(ctx context.Context, c *cluster.Cluster) (*plan.Plan, error) {
	p, err := c.Plans().Latest()
	if err != nil {
		return nil, err
	}
	return plan.RequestAbort(ctx, c.Plans(), p.ID)
}

func start(ctx context.Context, c *cluster.Cluster, p *plan.Plan) error {
	if err := c.Plans().Save(ctx, p); err != nil {
		return err
	}
	return run(ctx, c, p.ID)
}

func run(ctx context.Context, c *cluster.Cluster, id string) error {
	ex := &Executor{C: c, Progress: c.Progress}
	err := plan.Run(ctx, c.Plans(), id, ex, c.Progress)
	if err != nil {
		return err
	}
	return markRolledBack(ctx, c.Plans(), id)
}

// markRolledBack marks the upgrade plan a finished rollback undid.
func markRolledBack(ctx context.Context, store *plan.Store, id string) error {
	p, err := store.Get(id)
	if err != nil || p.Kind != plan.KindRollback || p.State != plan.Done || p.Of == "" {
		return err
	}
	up, err := store.Get(p.Of)
	if err != nil {
		return err
	}
	up.State = plan.RolledBack
	for i := range up.Steps {
		if up.Steps[i].State == plan.Done {
			up.Steps[i].State = plan.RolledBack
		}
	}
	if err := store.Save(ctx, up); err != nil {
		return err
	}
	// Save made the upgrade plan the latest; the rollback is the latest.
	return store.Save(ctx, p)
}

func requireNoActivePlan(store *plan.Store) error {
	if store.Locked() {
		return plan.ErrLocked
	}
	p, err := store.Latest()
	if errors.Is(err, plan.ErrNoPlan) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.Active() {
		cur := p.Current()
		where := ""
		if cur != nil {
			where = fmt.Sprintf(" at step %d (%s)", cur.Index, cur.Description)
		}
		return &plan.ActiveError{Plan: p, At: where, Abort: true, Undo: true}
	}
	return nil
}
