package kubeupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/kubeletrt"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

// fakeNode is a host's kubelet as its agent runs it and its Node as the
// API server reports it: after a switch the Node reports the old version,
// not Ready, for `lag` looks, then the new one, Ready.
type fakeNode struct {
	agent, reported string
	lag             int
	unsched         bool
	cordonedBy      string
	pods            []*fakePod
}

// fakePod is a pod on a node: owner "ReplicaSet", "DaemonSet", "mirror"
// (a static pod's) or "" (none); pdb counts the evictions a
// PodDisruptionBudget refuses first; an evicted pod is gone at the next
// look.
type fakePod struct {
	name, owner string
	pdb         int
	evicted     bool
}

func newFakeNode() *fakeNode {
	return &fakeNode{agent: "v1.35.4", reported: "v1.35.4", pods: []*fakePod{
		{name: "kube-system/kube-apiserver", owner: "mirror"},
		{name: "kube-system/kube-proxy-x", owner: "DaemonSet"},
		{name: "default/web-1", owner: "ReplicaSet"},
	}}
}

func (f *fakeKube) event(e string) {
	if f.writesBefore < 0 {
		f.writesBefore = len(f.writes)
	}
	f.events = append(f.events, e)
}

func (f *fakeKube) Node(_ context.Context, host string) (NodeState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[host]
	if n.reported != n.agent {
		if n.lag > 0 {
			n.lag--
			return NodeState{KubeletVersion: n.reported, Ready: false, Unschedulable: n.unsched, CordonedBy: n.cordonedBy}, nil
		}
		n.reported = n.agent
	}
	return NodeState{KubeletVersion: n.reported, Ready: true, Unschedulable: n.unsched, CordonedBy: n.cordonedBy}, nil
}

func (f *fakeKube) Cordon(_ context.Context, host, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.event(host + " cordon")
	n := f.nodes[host]
	n.unsched, n.cordonedBy = true, id
	return nil
}

func (f *fakeKube) Uncordon(_ context.Context, host, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[host]
	if n.cordonedBy == id {
		f.event(host + " uncordon")
		n.unsched, n.cordonedBy = false, ""
	}
	return nil
}

func (f *fakeKube) Evict(_ context.Context, host string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[host]
	var left []string
	var keep []*fakePod
	for _, p := range n.pods {
		switch {
		case p.evicted:
			continue // gone
		case p.owner == "mirror" || p.owner == "DaemonSet":
		case p.owner == "":
			return nil, fmt.Errorf("%w: pod %s", ErrUnmanagedPod, p.name)
		case p.pdb > 0:
			p.pdb--
			left = append(left, p.name+" (pdb)")
		default:
			p.evicted = true
			f.event(host + " evict " + p.name)
			left = append(left, p.name+" (evicted)")
		}
		keep = append(keep, p)
	}
	n.pods = keep
	return left, nil
}

func (f *fakeKube) SwitchKubelet(_ context.Context, host, version string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[host]
	if n.agent == version {
		// The agent's switch to what runs restarts nothing.
		f.event(host + " switch-unchanged " + version)
		return nil
	}
	f.event(host + " switch " + version)
	n.agent, n.lag = version, 2
	for _, c := range kubeversion.ControlPlane {
		f.unready[host+"/"+c] = 4
	}
	return nil
}

// checkOneAtATime: each host's kubelet events are contiguous (never two
// nodes at once) and in host order.
func checkOneAtATime(t *testing.T, events []string) {
	t.Helper()
	var order []string
	for _, e := range events {
		h, _, _ := strings.Cut(e, " ")
		if len(order) == 0 || order[len(order)-1] != h {
			if slices.Contains(order, h) {
				t.Errorf("host %s's kubelet events interleaved with another's: %v", h, events)
			}
			order = append(order, h)
		}
	}
}

func (f *fakeKube) podNames(host string) []string {
	var out []string
	for _, p := range f.nodes[host].pods {
		out = append(out, p.name)
	}
	return out
}

// TestKubeletsAfterTheSwitch: the whole plan moves every kubelet after
// switching-emulated-version (every manifest written first) and before
// migrating-storage, one node at a time in host order: cordoned, drained
// (a minor upgrade: the skew policy's rule) of its ReplicaSet pod only
// (the DaemonSet's and the mirror pod stay), switched through its agent,
// waited for until its Node reports the target and Ready and its static
// pods are ready again (the new kubelet reports them unready until their
// probes pass), uncordoned.
func TestKubeletsAfterTheSwitch(t *testing.T) {
	f := newFakeKube(t)
	f.nodes["node-b"].pods[2].pdb = 3 // evicted on the fourth try
	st, p := newKubePlan(t, f)
	var kinds []string
	for _, s := range p.Steps {
		kinds = append(kinds, s.Kind)
	}
	if want := "started,upgrading-first-control-plane,upgrading-second-control-plane,upgrading-third-control-plane,upgrading-controllers,upgrading-controllers,upgrading-controllers,switching-emulated-version,upgrading-kubelets,upgrading-kubelets,upgrading-kubelets,migrating-storage,complete"; strings.Join(kinds, ",") != want {
		t.Fatalf("steps %s", strings.Join(kinds, ","))
	}
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	if f.writesBefore != len(f.writes) {
		t.Errorf("the kubelets moved after %d of %d manifest writes: want after every one (switching-emulated-version first)", f.writesBefore, len(f.writes))
	}
	want := []string{}
	for _, h := range hosts {
		want = append(want, h+" cordon", h+" evict default/web-1", h+" switch v1.36.3", h+" uncordon")
	}
	if !slices.Equal(f.events, want) {
		t.Errorf("events %v\nwant   %v", f.events, want)
	}
	checkOneAtATime(t, f.events)
	for _, h := range hosts {
		n := f.nodes[h]
		if n.reported != "v1.36.3" || n.unsched || n.cordonedBy != "" {
			t.Errorf("%s: %+v", h, n)
		}
		if got := strings.Join(f.podNames(h), ","); got != "kube-system/kube-apiserver,kube-system/kube-proxy-x" {
			t.Errorf("%s: pods left %s: want the mirror and DaemonSet pods", h, got)
		}
	}
	p = mustGet(t, st, p.ID)
	cs, _ := Components(p)
	n := 0
	for _, c := range cs {
		if c.Component == kubeversion.Kubelet {
			n++
			if c.State != ComponentUpgraded || !c.Drain {
				t.Errorf("%s kubelet: %+v", c.Host, c)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d kubelets in the components, want 3", n)
	}
	if !strings.Contains(describe(p), "12/12 components upgraded") {
		t.Errorf("describe: %s", describe(p))
	}
}

// patchPlan is a plan from v1.36.0 to v1.36.3 (no emulation: the
// kubelets are the first step after the controllers).
func patchPlan(t *testing.T, f *fakeKube) (*plan.Store, *plan.Plan) {
	t.Helper()
	var insts []kubeversion.Instance
	for _, h := range hosts {
		for _, c := range kubeversion.ControlPlane {
			insts = append(insts, kubeversion.Instance{Host: h, Component: c, Version: "v1.36.0", Image: "registry.k8s.io/" + c + ":v1.36.0"})
			f.running[h+"/"+c] = "registry.k8s.io/" + c + ":v1.36.0"
			f.man[h+"/"+c] = []byte(strings.ReplaceAll(string(f.man[h+"/"+c]), "v1.35.4", "v1.36.0"))
		}
		insts = append(insts, kubeversion.Instance{Host: h, Component: kubeversion.Kubelet, Version: "v1.36.0"})
		f.nodes[h].agent, f.nodes[h].reported = "v1.36.0", "v1.36.0"
	}
	dry, err := kubeversion.BuildPlan(kubeversion.Inputs{Target: "v1.36.3", Instances: insts, EtcdVersions: map[string]string{"etcd-1": "3.6.16"},
		Etcd: catalogue.Default(), Stored: &kstorage.Report{}, Removed: kubeversion.Catalogue(kstorage.DefaultRemoved())})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(dry, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := plan.OpenStore(t.TempDir())
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return st, p
}

// TestKubeletsPatchKeepsPods: within a minor the nodes are cordoned and
// their pods kept (nothing evicted); once a kubelet step started, a
// rollback is refused (a kubelet is never moved back).
func TestKubeletsPatchKeepsPods(t *testing.T) {
	f := newFakeKube(t)
	st, p := patchPlan(t, f)
	for _, k := range mustPayload(t, p).Kubelets {
		if k.Drain {
			t.Errorf("patch upgrade: %s drained", k.Host)
		}
	}
	p = upgradeUntil(t, f, st, p, kubeversion.StepKubelets)
	if _, err := RollbackOf(p); err != nil {
		t.Fatalf("before the kubelets: %v", err)
	}
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.events {
		if strings.Contains(e, " evict ") {
			t.Errorf("patch upgrade evicted: %v", f.events)
		}
	}
	for _, h := range hosts {
		if len(f.nodes[h].pods) != 3 || f.nodes[h].reported != "v1.36.3" || f.nodes[h].unsched {
			t.Errorf("%s: %+v", h, f.nodes[h])
		}
	}
	// A plan whose first kubelet step ran is past its point of no return.
	p = mustGet(t, st, p.ID)
	for i := range p.Steps {
		if p.Steps[i].Kind == kubeversion.StepKubelets {
			p.State, p.Steps[i].State = plan.Failed, plan.Failed
			for j := i + 1; j < len(p.Steps); j++ {
				p.Steps[j].State = plan.Pending
			}
			break
		}
	}
	if _, err := RollbackOf(p); !errors.Is(err, ErrPointOfNoReturn) || !strings.Contains(err.Error(), "a kubelet is never moved back") {
		t.Errorf("rollback after a kubelet step: %v", err)
	}
}

// TestKubeletsUserCordonLeft: a node its user cordoned before the plan
// is drained and switched but left cordoned; the others are uncordoned.
func TestKubeletsUserCordonLeft(t *testing.T) {
	f := newFakeKube(t)
	f.nodes["node-b"].unsched = true
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.events {
		if e == "node-b cordon" || e == "node-b uncordon" {
			t.Errorf("the plan cordoned or uncordoned node-b: %v", f.events)
		}
	}
	if !slices.Contains(f.events, "node-b switch v1.36.3") || !slices.Contains(f.events, "node-b evict default/web-1") {
		t.Errorf("node-b not drained and switched: %v", f.events)
	}
	if n := f.nodes["node-b"]; !n.unsched || n.reported != "v1.36.3" {
		t.Errorf("node-b: %+v, want cordoned still, at v1.36.3", n)
	}
	if f.nodes["node-a"].unsched || f.nodes["node-c"].unsched {
		t.Error("a node the plan cordoned is left cordoned")
	}
}

// TestKubeletsResumeAfterKill: a kill at every point of a kubelet step
// (after the cordon, after the drain, after the switch, after the step's
// end before it was recorded done) on every host, resumed: what was done
// is not done again (no second cordon, eviction or switch of that host),
// the node is uncordoned at the end, one node at a time, the plan done.
func TestKubeletsResumeAfterKill(t *testing.T) {
	for _, host := range hosts {
		for _, point := range []string{PointKubeletCordoned, PointKubeletDrained, PointKubeletSwitched, "done"} {
			t.Run(point+":"+host, func(t *testing.T) {
				f := newFakeKube(t)
				st, p := newKubePlan(t, f)
				p = upgradeUntil(t, f, st, p, kubeversion.StepKubelets)
				ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
				pl := mustPayload(t, p)
				var idx int
				for i := range p.Steps {
					s := &p.Steps[i]
					if s.Kind != kubeversion.StepKubelets {
						continue
					}
					if s.Member == host {
						idx = i
						break
					}
					if err := ex.kubeletStep(t.Context(), p.ID, pl, s.Member); err != nil {
						t.Fatal(err)
					}
					s.State = plan.Done
				}
				// What the killed step did on host.
				f.mu.Lock()
				n := f.nodes[host]
				n.unsched, n.cordonedBy = true, p.ID
				if point != PointKubeletCordoned {
					n.pods = n.pods[:2]
				}
				if point == PointKubeletSwitched || point == "done" {
					n.agent, n.lag = "v1.36.3", 1
				}
				if point == "done" {
					n.reported, n.lag, n.unsched, n.cordonedBy = "v1.36.3", 0, false, ""
				}
				f.events = nil
				f.mu.Unlock()
				p.Steps[idx].State = plan.Running
				if err := st.Save(t.Context(), p); err != nil {
					t.Fatal(err)
				}
				if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
					t.Fatalf("resume: %v", err)
				}
				for _, e := range f.events {
					if e == host+" cordon" || strings.HasPrefix(e, host+" evict") && point != PointKubeletCordoned {
						t.Errorf("done again on resume: %v", f.events)
					}
					if e == host+" switch v1.36.3" && (point == PointKubeletSwitched || point == "done") {
						t.Errorf("switched again on resume: %v", f.events)
					}
				}
				if point == PointKubeletCordoned || point == PointKubeletDrained {
					if !slices.Contains(f.events, host+" switch v1.36.3") {
						t.Errorf("not switched on resume: %v", f.events)
					}
				}
				checkOneAtATime(t, f.events)
				for _, h := range hosts {
					if n := f.nodes[h]; n.unsched || n.reported != "v1.36.3" {
						t.Errorf("%s after the resume: %+v", h, n)
					}
				}
				if got := mustGet(t, st, p.ID); got.State != plan.Done {
					t.Errorf("plan %s", got.State)
				}
			})
		}
	}
}

// TestKubeletsUnmanagedPod: a pod no controller manages fails the drain
// (evicted it would be gone for good): nothing switched, the node stays
// cordoned by the plan until the resume.
func TestKubeletsUnmanagedPod(t *testing.T) {
	f := newFakeKube(t)
	f.nodes["node-a"].pods = append(f.nodes["node-a"].pods, &fakePod{name: "default/bare"})
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	err := plan.Run(t.Context(), st, p.ID, ex, nil)
	if !errors.Is(err, ErrUnmanagedPod) || !strings.Contains(err.Error(), "host node-a") || !strings.Contains(err.Error(), "default/bare") {
		t.Fatalf("run: %v", err)
	}
	if slices.ContainsFunc(f.events, func(e string) bool { return strings.Contains(e, " switch ") }) {
		t.Errorf("switched: %v", f.events)
	}
	if s := State(mustGet(t, st, p.ID)); s != "upgrading-kubelets-failed" {
		t.Errorf("state %s", s)
	}
	f.mu.Lock()
	f.nodes["node-a"].pods = f.nodes["node-a"].pods[:3]
	f.mu.Unlock()
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if f.nodes["node-a"].unsched {
		t.Error("node-a left cordoned")
	}
}

type fakeRuntime struct{ st kubeletrt.Status }

func (r fakeRuntime) Kubelet(context.Context) (kubeletrt.Status, error) { return r.st, nil }
func (r fakeRuntime) SwitchKubelet(context.Context, string) (kubeletrt.Status, error) {
	return r.st, errors.New("not in this test")
}

// TestCheckKubelets: apply refuses, before anything is recorded, a host
// whose agent does not run its kubelet or lacks the target's binary,
// naming the host, the agent and the version.
func TestCheckKubelets(t *testing.T) {
	kubelets := []PlannedComponent{{Host: "node-a", Component: kubeversion.Kubelet, ToVersion: "v1.36.3"}, {Host: "node-b", Component: kubeversion.Kubelet, ToVersion: "v1.36.3"}}
	agents := func(caps map[string][]string, avail map[string][]string) func(string) (string, kubeletrt.Runtime, []string, error) {
		return func(h string) (string, kubeletrt.Runtime, []string, error) {
			return h, fakeRuntime{kubeletrt.Status{Available: avail[h]}}, caps[h], nil
		}
	}
	all := map[string][]string{"node-a": {capKubelet}, "node-b": {capKubelet}}
	ok := map[string][]string{"node-a": {"v1.35.4", "v1.36.3"}, "node-b": {"v1.35.4", "v1.36.3"}}
	if err := checkKubelets(t.Context(), agents(all, ok), kubelets); err != nil {
		t.Fatal(err)
	}
	err := checkKubelets(t.Context(), agents(all, map[string][]string{"node-a": {"v1.35.4", "v1.36.3"}, "node-b": {"v1.35.4"}}), kubelets)
	me, isMissing := errors.AsType[*MissingKubeletError](err)
	if !isMissing || me.Host != "node-b" || me.Version != "v1.36.3" || !errors.Is(err, ErrMissingKubelet) ||
		!strings.Contains(err.Error(), "host node-b: its Steward agent node-b has no kubelet v1.36.3 binary (it has v1.35.4)") {
		t.Errorf("missing binary: %v", err)
	}
	err = checkKubelets(t.Context(), agents(map[string][]string{"node-a": {capKubelet}}, ok), kubelets)
	if !errors.Is(err, ErrNoKubelet) || !strings.Contains(err.Error(), "host node-b: its Steward agent node-b does not run the host's kubelet") {
		t.Errorf("no kubelet capability: %v", err)
	}
}
