package carotate

import (
	"context"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// The CA rotation and CA rotation rollback plan kinds (plan.KindSpec).
// `steward rollback` rolls back a rotation that did not finish, and
// resumes (or plans again, aborted) a rollback that did not; RollbackOf
// words the refusals.
func init() {
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindCARotation, Admission: admitRotation,
		Resume: Run, Show: show, Describe: plan.DescribeKind, Condition: plan.CondCertificateRotationInProgress,
		Undo: plan.KindCARotationRollback, UndoApplies: func(p *plan.Plan) bool { return p.State != plan.Done && p.State != plan.RolledBack }})
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindCARotationRollback, Admission: admitRollback,
		Resume: RunRollback, Show: show, Describe: plan.DescribeKind, Condition: plan.CondCertificateRotationInProgress,
		Undo: plan.KindCARotationRollback, UndoApplies: func(p *plan.Plan) bool { return p.State != plan.Done },
		Rollback: func(ctx context.Context, c *cluster.Cluster, _ plan.UndoOptions) (*plan.Plan, error) {
			return Rollback(ctx, c)
		}})
}

// admitRotation admits a CA rotation: no plan open, whatever its kind.
var admitRotation = plan.Admission{}

// admitRollback admits a CA rotation rollback whatever the latest plan:
// RollbackOf judges it (an active rotation is superseded). While a process
// runs a plan it refuses with ErrPlanRunning, for the command to say how
// to stop it.
var admitRollback = plan.Admission{
	Locked: ErrPlanRunning,
	Refuse: func(*plan.Plan) error { return nil },
}
