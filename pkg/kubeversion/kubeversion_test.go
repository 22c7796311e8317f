package kubeversion

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/kstorage"
)

// TestKnown: every known version parses, has an image for each
// control-plane component, kube-proxy, pause, etcd and coredns by
// kubeadm's names, and an etcd version.
func TestKnown(t *testing.T) {
	if len(Known()) == 0 {
		t.Fatal("no known version")
	}
	for _, k := range Known() {
		v, err := Parse(k.Version)
		if err != nil || v.String() != k.Version {
			t.Errorf("%s: parses as %v, %v", k.Version, v, err)
		}
		for _, c := range append(append([]string{}, ControlPlane...), "kube-proxy") {
			if want := "registry.k8s.io/" + c + ":" + k.Version; k.Images[c] != want {
				t.Errorf("%s: %s image %q, want %q", k.Version, c, k.Images[c], want)
			}
		}
		for _, c := range []string{"pause", "etcd", "coredns"} {
			if !strings.HasPrefix(k.Images[c], "registry.k8s.io/") {
				t.Errorf("%s: %s image %q", k.Version, c, k.Images[c])
			}
		}
		if !strings.HasPrefix(k.Images["etcd"], "registry.k8s.io/etcd:"+k.EtcdVersion+"-") {
			t.Errorf("%s: etcd %s but image %s", k.Version, k.EtcdVersion, k.Images["etcd"])
		}
		if _, ok := FlagChanges(v.Minor); !ok && v.Minor != 35 {
			t.Errorf("%s: no flag changes recorded for its minor", k.Version)
		}
	}
	if k, ok := Lookup("1.36.3"); !ok || k.EtcdVersion != "3.6.8" {
		t.Errorf("Lookup(1.36.3) = %+v, %v", k, ok)
	}
	if _, ok := Lookup("v1.37.0"); ok {
		t.Error("v1.37.0 known")
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"v1.36.3": "v1.36.3", "1.35.4": "v1.35.4", "v1.36.3-rc.1": "v1.36.3", "v1.36.0+abc": "v1.36.0"} {
		if v, err := Parse(in); err != nil || v.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, v, err, want)
		}
	}
	for _, in := range []string{"", "v1.36", "1.x.3", "v1.36.3.4", "v-1.2.3", "latest"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}

// cluster is three hosts with the control plane at cp and kubelets at kl.
func cluster(cp, kl string) []Instance {
	var out []Instance
	for _, h := range []string{"node-a", "node-b", "node-c"} {
		for _, c := range ControlPlane {
			out = append(out, Instance{Host: h, Component: c, Version: cp, Image: "registry.k8s.io/" + c + ":" + cp})
		}
		out = append(out, Instance{Host: h, Component: Kubelet, Version: kl})
	}
	return out
}

func set(insts []Instance, host, comp, version string) []Instance {
	out := append([]Instance(nil), insts...)
	for i := range out {
		if out[i].Host == host && out[i].Component == comp {
			out[i].Version = version
		}
	}
	return out
}

func TestCheckSkew(t *testing.T) {
	base := cluster("v1.35.4", "v1.35.4")
	for _, tc := range []struct {
		name  string
		insts []Instance
		want  []string // host and component of each violation, in order
		says  string
	}{
		{"all the same", base, nil, ""},
		{"API servers one minor apart", set(base, "node-a", APIServer, "v1.36.3"), nil, ""},
		{"API servers two minors apart", set(base, "node-b", APIServer, "v1.33.1"), nil, ""},
		{"scheduler newer than an API server", set(base, "node-c", Scheduler, "v1.36.3"), []string{"node-c kube-scheduler"}, "newer than kube-apiserver"},
		{"controller-manager one minor older", set(base, "node-a", ControllerManager, "v1.34.2"), nil, ""},
		{"controller-manager two minors older", set(base, "node-a", ControllerManager, "v1.33.2"), []string{"node-a kube-controller-manager"}, "more than one minor older"},
		{"kubelet three minors older", set(base, "node-b", Kubelet, "v1.32.0"), nil, ""},
		{"kubelet four minors older", set(base, "node-b", Kubelet, "v1.31.9"), []string{"node-b kubelet"}, "more than three minors older than kube-apiserver v1.35.4"},
		{"kubelet newer than an API server", set(base, "node-a", Kubelet, "v1.36.3"), []string{"node-a kubelet"}, "upgrade every API server first"},
		{"patch skew is no skew", set(base, "node-a", Scheduler, "v1.35.9"), nil, ""},
		{"unreadable version", set(base, "node-a", Kubelet, "unknown"), []string{"node-a kubelet"}, "not a Kubernetes release version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckSkew(tc.insts)
			var names []string
			for _, v := range got {
				names = append(names, v.Host+" "+v.Component)
				if !strings.Contains(v.Message, v.Host) || !strings.Contains(v.Message, v.Component) {
					t.Errorf("message names neither host nor component: %s", v.Message)
				}
				if !errors.Is(v, ErrSkew) {
					t.Errorf("kind %v", v.Kind)
				}
			}
			if tc.name == "API servers two minors apart" {
				// node-b's API server at 1.33 also makes every 1.35
				// controller-manager, scheduler and kubelet newer than it.
				tc.want = nil
				for _, h := range []string{"node-a", "node-b", "node-c"} {
					if h == "node-b" {
						tc.want = append(tc.want, "node-b kube-apiserver")
					}
					tc.want = append(tc.want, h+" kube-controller-manager", h+" kube-scheduler", h+" kubelet")
				}
				tc.says = "newer than kube-apiserver v1.33.1 on host node-b"
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("violations %v, want %v: %v", names, tc.want, got)
			}
			if tc.says != "" && !strings.Contains(got[0].Message, tc.says) {
				t.Errorf("message %q does not say %q", got[0].Message, tc.says)
			}
		})
	}
}

func TestCheckTarget(t *testing.T) {
	base := cluster("v1.35.4", "v1.35.4")
	for _, tc := range []struct {
		name   string
		insts  []Instance
		target string
		kind   error
		says   string
	}{
		{"next minor", base, "v1.36.3", nil, ""},
		{"patch", cluster("v1.36.0", "v1.36.0"), "v1.36.3", nil, ""},
		{"same version", base, "v1.35.4", nil, ""},
		{"skips a minor", base, "v1.37.2", ErrSkippedMinor, "upgrade through each minor in turn (v1.36.3 then v1.37.2), planning v1.36.3 first"},
		{"skips two minors, one unknown", cluster("v1.34.1", "v1.34.1"), "v1.37.0", ErrSkippedMinor, "(v1.35.4 then v1.36.3 then v1.37.0)"},
		{"kubelet too old", set(base, "node-c", Kubelet, "v1.32.7"), "v1.36.3", ErrKubeletTooOld, "host node-c: kubelet v1.32.7 is more than three minors older than the target v1.36.3: upgrade that host's kubelet to v1.33 or newer first"},
		{"kubelet three older than the target", set(base, "node-c", Kubelet, "v1.33.0"), "v1.36.3", nil, ""},
		{"downgrade", base, "v1.34.0", ErrDowngrade, "never goes backwards"},
		{"one API server already newer", set(base, "node-a", APIServer, "v1.36.3"), "v1.36.0", ErrDowngrade, "host node-a: kube-apiserver runs v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tv, err := Parse(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			got := CheckTarget(tc.insts, tv)
			if tc.kind == nil {
				if len(got) != 0 {
					t.Fatalf("violations %v", got)
				}
				return
			}
			if len(got) == 0 {
				t.Fatal("no violation")
			}
			if !errors.Is(got[0], tc.kind) {
				t.Errorf("kind %v, want %v", got[0].Kind, tc.kind)
			}
			if !strings.Contains(got[0].Message, tc.says) {
				t.Errorf("message %q does not say %q", got[0].Message, tc.says)
			}
			// One message for the whole cluster, not one per component.
			if len(got) != 1 {
				t.Errorf("%d violations, want 1: %v", len(got), got)
			}
		})
	}
}

func TestStates(t *testing.T) {
	none := func(Version) []string { return nil }
	missing := func(Version) []string { return []string{"image registry.k8s.io/kube-apiserver:v1.36.3"} }
	state := func(vs []VersionState, v string) VersionState {
		for _, s := range vs {
			if s.Version == v {
				return s
			}
		}
		t.Fatalf("%s not listed: %+v", v, vs)
		return VersionState{}
	}
	vs := States(cluster("v1.35.4", "v1.35.4"), none)
	if s := state(vs, "v1.35.4"); s.State != StateActive || s.Running != 12 || s.Components != 12 || len(s.Hosts) != 3 || !s.Known {
		t.Errorf("v1.35.4: %+v", s)
	}
	if s := state(vs, "v1.36.3"); s.State != StateAvailable || s.Running != 0 || len(s.Hosts) != 0 || s.EtcdVersion != "3.6.8" {
		t.Errorf("v1.36.3: %+v", s)
	}
	if vs[0].Version != "v1.36.3" {
		t.Errorf("not newest first: %+v", vs)
	}
	vs = States(set(cluster("v1.35.4", "v1.35.4"), "node-b", APIServer, "v1.36.3"), missing)
	if s := state(vs, "v1.35.4"); s.State != StatePartial || s.Running != 11 {
		t.Errorf("v1.35.4: %+v", s)
	}
	if s := state(vs, "v1.36.3"); s.State != StatePartial || s.Running != 1 || strings.Join(s.Hosts, ",") != "node-b" {
		t.Errorf("v1.36.3: %+v", s)
	}
	vs = States(cluster("v1.35.4", "v1.35.4"), missing)
	if s := state(vs, "v1.36.3"); s.State != StateUnavailable || len(s.Missing) != 1 {
		t.Errorf("v1.36.3 with its image missing: %+v", s)
	}
	vs = States(cluster("v1.34.2", "v1.34.2"), none)
	if s := state(vs, "v1.34.2"); s.State != StateActive || s.Known {
		t.Errorf("running, unknown v1.34.2: %+v", s)
	}
}

func inputs(target string, insts []Instance) Inputs {
	return Inputs{Target: target, Instances: insts, EtcdVersions: map[string]string{"node-a": "3.6.16", "node-b": "3.6.16", "node-c": "3.6.16"},
		Etcd: catalogue.Default(), Stored: &kstorage.Report{}, Removed: Catalogue(kstorage.DefaultRemoved()),
		Health: []Check{{Name: "etcd-health", Result: Pass, Message: "3 of 3 members healthy"}}}
}

func check(t *testing.T, p *Plan, name string) Check {
	t.Helper()
	for _, c := range p.Preflight {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check: %+v", name, p.Preflight)
	return Check{}
}

func TestBuildPlan(t *testing.T) {
	p, err := BuildPlan(inputs("v1.36.3", cluster("v1.35.4", "v1.35.4")))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refusal(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if strings.Join(p.From, ",") != "v1.35.4" || p.To != "v1.36.3" || strings.Join(p.Path, ",") != "v1.36.3" {
		t.Errorf("from %v to %s path %v", p.From, p.To, p.Path)
	}
	if len(p.Hosts) != 3 {
		t.Fatalf("hosts %+v", p.Hosts)
	}
	for _, h := range p.Hosts {
		if len(h.Components) != 4 {
			t.Fatalf("%s: %+v", h.Host, h.Components)
		}
		for i, c := range h.Components {
			if c.Component != Components[i] || !c.Changes || c.ToVersion != "v1.36.3" || c.FromVersion != "v1.35.4" || !c.FlagsKnown {
				t.Errorf("%s: %+v", h.Host, c)
			}
			// The new minor first emulates the old one (KEP-4330);
			// kubelets have no such flag.
			wantFlags := []FlagChange{{Component: c.Component, Flag: EmulatedVersionFlag, To: "1.35"}}
			if c.Component == Kubelet {
				wantFlags = []FlagChange{}
			}
			if !slices.Equal(c.FlagChanges, wantFlags) {
				t.Errorf("%s %s: flag changes %+v, want %+v", h.Host, c.Component, c.FlagChanges, wantFlags)
			}
			if c.Component != Kubelet && (c.FromImage != "registry.k8s.io/"+c.Component+":v1.35.4" || c.ToImage != "registry.k8s.io/"+c.Component+":v1.36.3") {
				t.Errorf("%s: images %s -> %s", h.Host, c.FromImage, c.ToImage)
			}
		}
	}
	if p.EmulatedVersion != "1.35" {
		t.Errorf("emulated version %q, want 1.35", p.EmulatedVersion)
	}
	// A patch upgrade emulates nothing and has no switching step.
	patch, err := BuildPlan(inputs("v1.36.3", cluster("v1.36.0", "v1.36.0")))
	if err != nil {
		t.Fatal(err)
	}
	if patch.EmulatedVersion != "" {
		t.Errorf("patch upgrade: emulated version %q", patch.EmulatedVersion)
	}
	for _, s := range patch.Steps {
		if s.State == StepSwitchEmulation {
			t.Errorf("patch upgrade: a %s step", s.State)
		}
	}
	for _, h := range patch.Hosts {
		for _, c := range h.Components {
			if len(c.FlagChanges) != 0 {
				t.Errorf("patch upgrade: %s %s flag changes %+v", h.Host, c.Component, c.FlagChanges)
			}
		}
	}
	if p.Etcd.Needed || p.Etcd.Running != "3.6.16" || p.Etcd.TestedWith != "3.6.8" {
		t.Errorf("etcd %+v", p.Etcd)
	}
	var states []string
	for _, s := range p.Steps {
		states = append(states, s.State)
	}
	if want := "started,upgrading-first-control-plane,upgrading-second-control-plane,upgrading-third-control-plane,upgrading-controllers,upgrading-controllers,upgrading-controllers,switching-emulated-version,migrating-storage,complete"; strings.Join(states, ",") != want {
		t.Errorf("steps %s\nwant %s", strings.Join(states, ","), want)
	}
	// API servers first, one host each; then the controllers, the
	// leader's host last.
	in0 := inputs("v1.36.3", cluster("v1.35.4", "v1.35.4"))
	in0.Leaders = []string{"node-a"}
	pl, err := BuildPlan(in0)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range pl.Steps {
		if s.Host != "" {
			order = append(order, s.Host+":"+strings.Join(s.Components, "+"))
		}
	}
	if want := "node-a:kube-apiserver,node-b:kube-apiserver,node-c:kube-apiserver,node-b:kube-controller-manager+kube-scheduler,node-c:kube-controller-manager+kube-scheduler,node-a:kube-controller-manager+kube-scheduler"; strings.Join(order, ",") != want {
		t.Errorf("order %s\nwant %s", strings.Join(order, ","), want)
	}
	if check(t, p, "etcd-health").Result != Pass {
		t.Error("health check not carried")
	}

	// etcd older than the target is tested with: etcd first.
	in := inputs("v1.36.3", cluster("v1.35.4", "v1.35.4"))
	in.EtcdVersions["node-b"] = "3.6.6"
	p, err = BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Etcd.Needed || p.Etcd.Running != "3.6.6" || p.Etcd.UpgradeTo != "3.6.16" || p.Steps[1].State != StepUpgradingEtcd {
		t.Errorf("etcd %+v, steps %+v", p.Etcd, p.Steps)
	}
	if p.Refusal() != nil {
		t.Errorf("an etcd step refused: %v", p.Refusal())
	}
}

// TestBuildPlanKeepsRepository: a cluster running images from another
// repository (kubeadm imageRepository, a mirror) is given the target tag
// in that repository, and the repository alone is no change.
func TestBuildPlanKeepsRepository(t *testing.T) {
	in := inputs("v1.36.3", cluster("v1.35.4", "v1.35.4"))
	for i := range in.Instances {
		if in.Instances[i].Component != Kubelet {
			in.Instances[i].Image = "mirror.local:5000/k8s/" + in.Instances[i].Component + ":v1.35.4"
		}
	}
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range p.Hosts {
		for _, c := range h.Components {
			if c.Component != Kubelet && c.ToImage != "mirror.local:5000/k8s/"+c.Component+":v1.36.3" {
				t.Errorf("%s %s: to %s", h.Host, c.Component, c.ToImage)
			}
		}
	}
	// Already at the target, from the mirror: nothing changes.
	in = inputs("v1.36.3", cluster("v1.36.3", "v1.36.3"))
	for i := range in.Instances {
		if in.Instances[i].Component != Kubelet {
			in.Instances[i].Image = "mirror.local:5000/k8s/" + in.Instances[i].Component + ":v1.36.3"
		}
	}
	p, err = BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range p.Hosts {
		for _, c := range h.Components {
			if c.Changes {
				t.Errorf("%s %s: a repository alone counted as a change: %s -> %s", h.Host, c.Component, c.FromImage, c.ToImage)
			}
		}
	}
	for _, tc := range []struct{ running, target, want string }{
		{"", "registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-apiserver:v1.36.3"},
		{"reg:5000/kube-apiserver@sha256:abc", "registry.k8s.io/kube-apiserver:v1.36.3", "reg:5000/kube-apiserver:v1.36.3"},
		{"reg:5000/kube-apiserver:v1.35.4@sha256:abc", "registry.k8s.io/kube-apiserver:v1.36.3", "reg:5000/kube-apiserver:v1.36.3"},
		{"kube-apiserver:v1.35.4", "registry.k8s.io/kube-apiserver:v1.36.3", "kube-apiserver:v1.36.3"},
	} {
		if got := KeepRepository(tc.running, tc.target); got != tc.want {
			t.Errorf("KeepRepository(%q, %q) = %q, want %q", tc.running, tc.target, got, tc.want)
		}
	}
}

// TestBuildPlanRefusals: each bad input is refused with one message
// naming it and what to do.
func TestBuildPlanRefusals(t *testing.T) {
	base := cluster("v1.35.4", "v1.35.4")
	if _, err := BuildPlan(inputs("v1.37.0", base)); !errors.Is(err, ErrNotInCatalogue) || !strings.Contains(err.Error(), "Kubernetes v1.37.0 is not in Steward's catalogue of versions (known: v1.35.4, v1.36.3)") {
		t.Errorf("v1.37.0: %v", err)
	}
	if _, err := BuildPlan(inputs("1.36", base)); !errors.Is(err, ErrNotInCatalogue) || !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
		t.Errorf("1.36: %v", err)
	}
	if _, err := BuildPlan(inputs("v1.36.3", nil)); !errors.Is(err, ErrNothingRuns) {
		t.Errorf("nothing: %v", err)
	}
	refused := func(in Inputs, kind error, says string) {
		t.Helper()
		p, err := BuildPlan(in)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Refusal()
		if !errors.Is(err, kind) || !strings.Contains(err.Error(), says) {
			t.Errorf("refusal %v, want %v saying %q", err, kind, says)
		}
	}
	refused(inputs("v1.36.3", cluster("v1.34.2", "v1.34.2")), ErrSkippedMinor, "path: host node-a: kube-apiserver v1.34.2 to v1.36.3 skips a minor: upgrade through each minor in turn (v1.35.4 then v1.36.3), planning v1.35.4 first")
	refused(inputs("v1.36.3", set(base, "node-b", Kubelet, "v1.32.0")), ErrKubeletTooOld, "host node-b: kubelet v1.32.0 is more than three minors older")
	refused(inputs("v1.35.4", cluster("v1.36.3", "v1.36.3")), ErrDowngrade, "never goes backwards")
	unhealthy := inputs("v1.36.3", base)
	unhealthy.Health = []Check{{Name: "apiservers-ready", Result: Fail, Message: "host node-b: kube-apiserver /readyz: 500"}}
	refused(unhealthy, ErrUnhealthy, "apiservers-ready: host node-b: kube-apiserver /readyz: 500")

	// A removed API still stored: scheduling.k8s.io/v1alpha1 Workloads
	// (1.35's alpha, gone in 1.36), as the inventory reports them.
	stored := inputs("v1.36.3", base)
	stored.Stored = &kstorage.Report{Resources: []kstorage.ResourceReport{{Resource: "workloads.scheduling.k8s.io",
		Versions: []kstorage.VersionReport{{APIVersion: "scheduling.k8s.io/v1alpha1", Kind: "Workload", Format: kstorage.FormatProtobuf, Objects: 2, Bytes: 300}}}}}
	refused(stored, ErrRemovedAPIStored, "removed-apis: v1.36.3 no longer serves what is stored: 2 workloads.scheduling.k8s.io stored as scheduling.k8s.io/v1alpha1 (removed in 1.36; use scheduling.k8s.io/v1alpha2): rewrite those objects")
	p, _ := BuildPlan(stored)
	if len(p.RemovedAPIs) != 1 || p.RemovedAPIs[0].Objects != 2 {
		t.Errorf("removed APIs %+v", p.RemovedAPIs)
	}
	// The same objects are no obstacle to staying on 1.35.
	stored.Target = "v1.35.4"
	if p, _ := BuildPlan(stored); p.Refusal() != nil {
		t.Errorf("1.35 refused: %v", p.Refusal())
	}
	// No inventory read: refused, not passed.
	none := inputs("v1.36.3", base)
	none.Stored = nil
	refused(none, ErrRemovedAPIStored, "was not read")
}

func TestRemovedBetween(t *testing.T) {
	cat := Catalogue(kstorage.DefaultRemoved())
	got := RemovedBetween(Semver{1, 35, 4}, Semver{1, 36, 3}, cat)
	var names []string
	for _, r := range got {
		names = append(names, r.APIVersion+" "+strings.Join(r.Kinds, "+"))
	}
	if want := "scheduling.k8s.io/v1alpha1 PriorityClass,scheduling.k8s.io/v1alpha1 Workload"; strings.Join(names, ",") != want {
		t.Errorf("1.35 -> 1.36 removes %v, want %s", names, want)
	}
	if len(RemovedBetween(Semver{1, 31, 0}, Semver{1, 32, 0}, cat)) != 1 {
		t.Error("kstorage's flowcontrol v1beta3 (1.32) not merged in")
	}
	for _, r := range Removed() {
		if r.Resource == "" || r.Kind == "" || r.Replacement == "" {
			t.Errorf("incomplete entry %+v", r)
		}
	}
}
