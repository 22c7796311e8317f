package upgrade

import (
	"context"
	"fmt"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// Apply plans an upgrade to o.To, saves the plan and runs it.
func Apply(ctx context.Context, c *cluster.Cluster, o Options) (*plan.Plan, error) {
	if _, err := plan.Admit(c.Plans(), admitUpgrade); err != nil {
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
	v, err := PayloadOf(p)
	if err != nil {
		return err
	}
	for _, s := range p.Steps {
		if s.Kind != StepPreflight {
			continue
		}
		checks, err := Preflight(ctx, c, v.From, s.Version)
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
	if _, err := plan.Admit(store, admitRollback); err != nil {
		return nil, err
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

// admitUpgrade admits an upgrade plan: no plan open, whatever its kind.
var admitUpgrade = plan.Admission{Refuse: func(p *plan.Plan) error {
	cur := p.Current()
	where := ""
	if cur != nil {
		where = fmt.Sprintf(" at step %d (%s)", cur.Number(), cur.Description)
	}
	return &plan.ActiveError{Plan: p, At: where, Abort: true, Undo: true}
}}

// admitRollback admits a rollback plan: there is a plan, and no plan is
// open but an upgrade (which the rollback supersedes) or an adoption (not
// waited for, as before the registry; NewRollback judges what there is to
// roll back). A CA rotation, a certificate take-over, a rollback, or a
// plan of a kind that does not expect etcd to move beneath it (a
// Kubernetes upgrade stopped half-way: its API servers may need the etcd
// it found) refuses.
var admitRollback = plan.Admission{NeedPlan: true, Refuse: func(p *plan.Plan) error {
	switch p.Kind {
	case plan.KindUpgrade, plan.KindAdopt, plan.KindAdoptUndo:
		return nil
	case plan.KindRollback:
		return &plan.ActiveError{Plan: p, Name: "rollback " + p.ID}
	}
	return plan.RefuseActive(p)
}}
