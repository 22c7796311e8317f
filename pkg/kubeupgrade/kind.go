package kubeupgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

// The kube-upgrade plan kind: defined, so that the dry run's plan has
// the shape apply will persist (its payload, its steps named in
// StarlingX's spirit, its states per host and component, its condition),
// and unit-tested in a registry of its own (kind_test.go). It is not yet
// registered in cluster.PlanKinds: with no apply, `steward status` would
// report a condition no plan can set. Apply registers it (Spec).

// KindKubeUpgrade is the plan kind of a Kubernetes upgrade.
const KindKubeUpgrade plan.Kind = "kube-upgrade"

// CondKubeUpgradeInProgress is the status condition of kube-upgrade plans.
const CondKubeUpgradeInProgress = "KubeUpgradeInProgress"

// ErrNotImplemented: applying (or resuming) a Kubernetes upgrade is not
// written yet; only its dry run is.
var ErrNotImplemented = errors.New("applying a Kubernetes upgrade is not implemented yet: only its dry run (the plan) is")

// Payload is what a kube-upgrade plan records about itself.
type Payload struct {
	From []string `json:"from"`
	To   string   `json:"to"`
	Path []string `json:"path"`
	// EtcdUpgradeTo is the etcd version upgraded to first ("" for none).
	EtcdUpgradeTo string `json:"etcdUpgradeTo,omitempty"`
	// Components are the host and component pairs the plan moves, with
	// their versions before and after.
	Components []PlannedComponent `json:"components"`
}

// PlannedComponent is one component on one host in the payload.
type PlannedComponent struct {
	Host        string `json:"host"`
	Component   string `json:"component"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
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
	pl := Payload{From: dry.From, To: dry.To, Path: dry.Path, Components: []PlannedComponent{}}
	if dry.Etcd.Needed {
		pl.EtcdUpgradeTo = dry.Etcd.UpgradeTo
	}
	for _, h := range dry.Hosts {
		for _, c := range h.Components {
			if c.Changes {
				pl.Components = append(pl.Components, PlannedComponent{Host: h.Host, Component: c.Component, FromVersion: c.FromVersion, ToVersion: c.ToVersion})
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
// ..., upgrading-kubelets, migrating-storage), its failed form when the
// plan failed there, complete when done.
func State(p *plan.Plan) string {
	if p.State == plan.Done {
		return kubeversion.StepComplete
	}
	for _, s := range p.Steps {
		if s.State == plan.Done {
			continue
		}
		if p.State == plan.Failed || s.State == plan.Failed {
			return kubeversion.FailedState(s.Kind)
		}
		return s.Kind
	}
	return kubeversion.StepComplete
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
		out = append(out, cs)
	}
	return out, nil
}

func movesComponent(s plan.Step, comp string) bool {
	if comp == kubeversion.Kubelet {
		return s.Kind == kubeversion.StepKubelets
	}
	return strings.HasPrefix(s.Kind, "upgrading-") && strings.HasSuffix(s.Kind, "-control-plane") ||
		strings.HasPrefix(s.Kind, "upgrading-control-plane-")
}

// Apply would run a kube-upgrade plan; it is not written yet.
func Apply(context.Context, *cluster.Cluster, *plan.Plan) error { return ErrNotImplemented }

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
	return fmt.Sprintf("kube-upgrade plan %s (Kubernetes to %s, %s)", p.ID, pl.To, State(p))
}

// Spec is the kind's registration: admitted when no plan has work left;
// resumed: not implemented yet.
func Spec() plan.KindSpec[*cluster.Cluster] {
	return plan.KindSpec[*cluster.Cluster]{
		Kind:      KindKubeUpgrade,
		Admission: plan.Admission{},
		Resume: func(context.Context, *cluster.Cluster, string) error {
			return ErrNotImplemented
		},
		Show:      show,
		Describe:  describe,
		Condition: CondKubeUpgradeInProgress,
	}
}
