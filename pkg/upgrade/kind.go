package upgrade

import (
	"context"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// The upgrade and rollback plan kinds (plan.KindSpec). A rollback is what
// `steward rollback` starts for an upgrade or a rollback, and for any plan
// whose kind names no undo of its own (the registry's default).
func init() {
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindUpgrade, Admission: admitUpgrade,
		Resume: run, Show: show, View: viewOf, Describe: describe, Condition: plan.CondUpgradeInProgress, Undo: plan.KindRollback})
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindRollback, Admission: admitRollback,
		Resume: run, Show: show, View: viewOf, Describe: describe, Condition: plan.CondUpgradeInProgress,
		Undo: plan.KindRollback, Rollback: rollback})
}

// rollback is Rollback with `steward rollback`'s options.
func rollback(ctx context.Context, c *cluster.Cluster, o plan.UndoOptions) (*plan.Plan, error) {
	return Rollback(ctx, c, Options{Strategy: o.Strategy, Force: o.Force, HealthTimeout: o.HealthTimeout})
}
