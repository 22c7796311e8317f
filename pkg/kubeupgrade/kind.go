package kubeupgrade

import (
	"fmt"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

// The kube-upgrade plan kind (registered in cluster.PlanKinds as the
// package initialises): its payload, its steps named in StarlingX's
// spirit, its states per host and component, its condition; the
// executor is executor.go, apply and resume apply.go.

func init() {
	cluster.PlanKinds.Register(Spec())
	cluster.PlanKinds.Register(RollbackSpec())
}

// KindKubeUpgrade is the plan kind of a Kubernetes upgrade.
const KindKubeUpgrade plan.Kind = "kube-upgrade"

// CondKubeUpgradeInProgress is the status condition of kube-upgrade plans.
const CondKubeUpgradeInProgress = "KubeUpgradeInProgress"

// Payload is what a kube-upgrade plan records about itself.
type Payload struct {
	From []string `json:"from"`
	To   string   `json:"to"`
	Path []string `json:"path"`
	// EtcdUpgradeTo is the etcd version upgraded to first ("" for none).
	EtcdUpgradeTo string `json:"etcdUpgradeTo,omitempty"`
	// Components are the host and component pairs the plan moves, with
	// their versions before and after (the control plane's static pods:
	// apply leaves kubelets where they are).
	Components []PlannedComponent `json:"components"`
	// Kubeconfig is the kubeconfig apply used; resume uses it again.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// StorageHashes are discovery's storage version hash per resource
	// when the plan was recorded: the migrating-storage step migrates
	// those whose hash changed.
	StorageHashes map[string]string `json:"storageHashes,omitempty"`
	// EmulatedVersion is the minor the moved components emulate until
	// the switching-emulated-version step, the plan's point of no return
	// ("" for a patch upgrade: no emulation, no such step).
	EmulatedVersion string `json:"emulatedVersion,omitempty"`
}

// PlannedComponent is one component on one host in the payload.
type PlannedComponent struct {
	Host        string `json:"host"`
	Component   string `json:"component"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// ToImage is the image the manifest is given; FlagChanges the flags
	// changed with it (the dry run's).
	ToImage     string                   `json:"toImage,omitempty"`
	FlagChanges []kubeversion.FlagChange `json:"flagChanges,omitempty"`
}

// Component states, per host and component.
const (
	ComponentPending   = "pending"
	ComponentUpgrading = "upgrading"
	ComponentUpgraded  = "upgraded"
)

// ComponentState is a component's state in a plan, from its steps.
type ComponentState struct {
	PlannedComponent
	State string `json:"state"`
}

// NewPlan makes the kube-upgrade plan of a dry run that passed its
// pre-flight checks: one step per dry-run step (its Kind the state it
// names), the payload from the dry run. It refuses a dry run with a
// failed check.
func NewPlan(dry *kubeversion.Plan, now time.Time) (*plan.Plan, error) {
	if err := dry.Refusal(); err != nil {
		return nil, err
	}
	p := &plan.Plan{ID: plan.NewID(KindKubeUpgrade, now), Kind: KindKubeUpgrade, State: plan.Pending, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	pl := Payload{From: dry.From, To: dry.To, Path: dry.Path, Components: []PlannedComponent{}, EmulatedVersion: dry.EmulatedVersion}
	if dry.Etcd.Needed {
		pl.EtcdUpgradeTo = dry.Etcd.UpgradeTo
	}
	for _, h := range dry.Hosts {
		for _, c := range h.Components {
			if c.Changes && c.Component != kubeversion.Kubelet {
				pl.Components = append(pl.Components, PlannedComponent{Host: h.Host, Component: c.Component, FromVersion: c.FromVersion, ToVersion: c.ToVersion,
					ToImage: c.ToImage, FlagChanges: c.FlagChanges})
			}
		}
	}
	if err := plan.SetPayload(p, pl); err != nil {
		return nil, err
	}
	for i, s := range dry.Steps {
		p.Steps = append(p.Steps, plan.Step{Index: i, Kind: s.State, Member: s.Host, Version: dry.To, Description: s.Description, State: plan.Pending})
	}
	return p, nil
}

// State is the plan's state in StarlingX's words: the kind of its first
// step not done (started, upgrading-etcd, upgrading-first-control-plane,
// ..., upgrading-controllers, switching-emulated-version,
// migrating-storage), its failed form when
// the plan failed there, aborted when aborted there, complete when done.
func State(p *plan.Plan) string {
	if p.State == plan.RolledBack {
		return StateRolledBack
	}
	return stateOf(p, kubeversion.StepComplete)
}

// StateRolledBack is a kube-upgrade plan's state once a kube-rollback
// plan undid it.
const StateRolledBack = "rolled-back"

func stateOf(p *plan.Plan, complete string) string {
	if p.State == plan.Done {
		return complete
	}
	for _, s := range p.Steps {
		if s.State == plan.Done {
			continue
		}
		if p.State == plan.Failed || s.State == plan.Failed {
			return kubeversion.FailedState(s.Kind)
		}
		if p.State == plan.Aborted {
			return s.Kind + "-aborted"
		}
		return s.Kind
	}
	return complete
}

// Components are the per host and component states, read from the
// steps: upgraded once the step moving it is done, upgrading while that
// step runs, its failed form when it failed, pending before.
func Components(p *plan.Plan) ([]ComponentState, error) {
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return nil, err
	}
	var out []ComponentState
	for _, c := range pl.Components {
		cs := ComponentState{PlannedComponent: c, State: ComponentPending}
		for _, s := range p.Steps {
			if s.Member != c.Host || !movesComponent(s, c.Component) {
				continue
			}
			switch s.State {
			case plan.Done:
				cs.State = ComponentUpgraded
			case plan.Running:
				cs.State = ComponentUpgrading
			case plan.Failed:
				cs.State = kubeversion.FailedState(ComponentUpgrading)
			}
		}
		if p.State == plan.RolledBack && cs.State != ComponentPending {
			cs.State = ComponentRolledBack
		}
		out = append(out, cs)
	}
	return out, nil
}

func movesComponent(s plan.Step, comp string) bool {
	switch comp {
	case kubeversion.Kubelet:
		return s.Kind == kubeversion.StepKubelets
	case kubeversion.APIServer:
		return isControlPlaneStep(s.Kind)
	}
	return s.Kind == kubeversion.StepControllers
}

func show(p *plan.Plan) string {
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return fmt.Sprintf("%s, %s", p.Kind, State(p))
	}
	return fmt.Sprintf("kube-upgrade %s to %s, %s", strings.Join(pl.From, ", "), pl.To, State(p))
}

func describe(p *plan.Plan) string {
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return plan.DescribeKind(p)
	}
	return fmt.Sprintf("kube-upgrade plan %s (Kubernetes to %s, %s%s)", p.ID, pl.To, State(p), componentSummary(p))
}

// componentSummary counts the components upgraded and names those in
// progress or failed: ", 4/9 components upgraded; node-b kube-apiserver
// upgrading".
func componentSummary(p *plan.Plan) string {
	cs, err := Components(p)
	if err != nil || len(cs) == 0 {
		return ""
	}
	n := 0
	var busy []string
	for _, c := range cs {
		switch c.State {
		case ComponentUpgraded:
			n++
		case ComponentPending:
		default:
			busy = append(busy, c.Host+" "+c.Component+" "+c.State)
		}
	}
	out := fmt.Sprintf(", %d/%d components upgraded", n, len(cs))
	if len(busy) > 0 {
		out += "; " + strings.Join(busy, ", ")
	}
	return out
}

// View is what `steward plan show -o json|yaml` prints: the record, the
// state in StarlingX's words and each host's and component's state.
type View struct {
	*plan.Plan
	KubeState  string           `json:"kubeState"`
	Components []ComponentState `json:"components"`
}

func view(p *plan.Plan) any {
	cs, _ := Components(p)
	if cs == nil {
		cs = []ComponentState{}
	}
	return View{Plan: p, KubeState: State(p), Components: cs}
}

// Spec is the kind's registration: admitted when no plan has work left;
// resumed from where the hosts are (Resume).
func Spec() plan.KindSpec[*cluster.Cluster] {
	return plan.KindSpec[*cluster.Cluster]{
		Kind:      KindKubeUpgrade,
		Admission: admission,
		Resume:    Resume,
		Show:      show,
		View:      view,
		Describe:  describe,
		Condition: CondKubeUpgradeInProgress,
	}
}
