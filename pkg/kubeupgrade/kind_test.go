package kubeupgrade

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

func dryRun(t *testing.T, kubelet string) *kubeversion.Plan {
	t.Helper()
	var insts []kubeversion.Instance
	for _, h := range []string{"node-a", "node-b", "node-c"} {
		for _, c := range kubeversion.ControlPlane {
			insts = append(insts, kubeversion.Instance{Host: h, Component: c, Version: "v1.35.4", Image: "registry.k8s.io/" + c + ":v1.35.4"})
		}
		insts = append(insts, kubeversion.Instance{Host: h, Component: kubeversion.Kubelet, Version: kubelet})
	}
	p, err := kubeversion.BuildPlan(kubeversion.Inputs{Target: "v1.36.3", Instances: insts, EtcdVersions: map[string]string{"etcd-1": "3.6.16"},
		Etcd: catalogue.Default(), Stored: &kstorage.Report{}, Removed: kubeversion.Catalogue(kstorage.DefaultRemoved())})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKubeUpgradeKind: the kind registers in a registry of its own,
// names its plan and condition, and its states per plan and per host and
// component follow the steps, failed forms included; a dry run that failed its pre-flight makes no plan.
func TestKubeUpgradeKind(t *testing.T) {
	now := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	if _, err := NewPlan(dryRun(t, "v1.32.0"), now); !errors.Is(err, kubeversion.ErrKubeletTooOld) {
		t.Fatalf("a refused dry run made a plan: %v", err)
	}
	p, err := NewPlan(dryRun(t, "v1.35.4"), now)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, s := range p.Steps {
		kinds = append(kinds, s.Kind)
	}
	if want := "started,upgrading-first-control-plane,upgrading-second-control-plane,upgrading-third-control-plane,upgrading-controllers,upgrading-controllers,upgrading-controllers,switching-emulated-version,migrating-storage,complete"; strings.Join(kinds, ",") != want {
		t.Errorf("steps %s", strings.Join(kinds, ","))
	}
	r := plan.NewRegistry[*cluster.Cluster]("")
	r.Register(Spec())
	if got := r.Conditions(); len(got) != 1 || got[0] != CondKubeUpgradeInProgress {
		t.Errorf("conditions %v", got)
	}
	if State(p) != "started" {
		t.Errorf("state %s", State(p))
	}
	// The first control plane done, the second failed.
	p.State = plan.Failed
	p.Steps[0].State, p.Steps[1].State, p.Steps[2].State = plan.Done, plan.Done, plan.Failed
	if s := State(p); s != "upgrading-second-control-plane-failed" {
		t.Errorf("state %s", s)
	}
	what, cond, ok := r.Describe(p)
	if !ok || cond != CondKubeUpgradeInProgress || what != "kube-upgrade plan "+p.ID+" (Kubernetes to v1.36.3, upgrading-second-control-plane-failed, 1/9 components upgraded; node-b kube-apiserver upgrading-failed)" {
		t.Errorf("Describe = %q, %q, %v", what, cond, ok)
	}
	if got, err := r.Show(p); err != nil || got != "kube-upgrade v1.35.4 to v1.36.3, upgrading-second-control-plane-failed" {
		t.Errorf("Show = %q, %v", got, err)
	}
	cs, err := Components(p)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, c := range cs {
		states[c.Host+" "+c.Component] = c.State
	}
	for k, want := range map[string]string{
		"node-a kube-apiserver": ComponentUpgraded, "node-a kube-scheduler": ComponentPending,
		"node-b kube-apiserver": "upgrading-failed", "node-c kube-controller-manager": ComponentPending,
		"node-a kubelet": "",
	} {
		if states[k] != want {
			t.Errorf("%s: %s, want %s", k, states[k], want)
		}
	}
	if len(cs) != 9 {
		t.Errorf("%d components, want 9 (apply leaves the kubelets)", len(cs))
	}
	b, err := json.Marshal(view(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"kube-upgrade"`, `"kubeState":"upgrading-second-control-plane-failed"`, `"host":"node-b","component":"kube-apiserver"`, `"state":"upgrading-failed"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("plan show -o json: no %s in %s", want, b)
		}
	}
	p.State = plan.Aborted
	p.Steps[2].State = plan.Pending
	if s := State(p); s != "upgrading-second-control-plane-aborted" {
		t.Errorf("aborted: %s", s)
	}
	p.State = plan.Done
	if State(p) != kubeversion.StepComplete {
		t.Errorf("done: %s", State(p))
	}
}
