package adopt

import (
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// The adopt, adopt-undo and certs-take-over plan kinds (plan.KindSpec).
// An adopt plan and its undo run on an attached cluster (resumed with only
// this machine's agent started); `steward rollback` plans none of them
// (`steward adopt --undo` gives a member back).
func init() {
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindAdopt, Admission: admitAdopt, Attached: true,
		Resume: Run, Show: show, Describe: describe, Condition: plan.CondAdoptionInProgress})
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindAdoptUndo, Admission: admitUndo, Attached: true,
		Resume: Run, Show: show, Describe: describe, Condition: plan.CondAdoptionInProgress})
	cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{Kind: plan.KindCertsTakeOver, Admission: admitTakeOver,
		Resume: RunTakeOver, Describe: plan.DescribeKind, Condition: plan.CondCertificateRotationInProgress})
}

var (
	// admitAdopt admits an adopt plan: no plan open, whatever its kind.
	admitAdopt = plan.Admission{}
	// admitTakeOver admits a certificate take-over: no plan open.
	admitTakeOver = plan.Admission{}
	// admitUndo admits the undo of an adoption while no plan but an
	// adopt plan is open (NewUndoPlan aborts the one it undoes).
	admitUndo = plan.Admission{Refuse: func(p *plan.Plan) error {
		if p.Kind == plan.KindAdopt {
			return nil
		}
		return plan.RefuseActive(p)
	}}
)
