package kubeversion

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/coreos/go-semver/semver"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// Check results.
const (
	Pass = "pass"
	Fail = "fail"
)

// Check is one pre-flight check's result.
type Check struct {
	// Name is the check: skew, path, kubelets, removed-apis,
	// etcd-version, etcd-health, alarms, apiservers-ready, certificates.
	Name    string `json:"name"`
	Result  string `json:"result"`
	Message string `json:"message"`
	// Kind is the refusal kind of a failed check (an Err* sentinel).
	Kind error `json:"-"`
}

// Inputs are what a dry run is computed from, all gathered by the caller
// (pkg/kubeupgrade) from the cluster.
type Inputs struct {
	Target    string
	Instances []Instance
	// EtcdVersions are the etcd members' running versions, by member.
	EtcdVersions map[string]string
	// Etcd is etcd's version catalogue (the etcd step's target patch).
	Etcd *catalogue.Catalogue
	// Stored is the storage-version inventory read from etcd; Removed the
	// removed-API catalogue (Catalogue of kstorage's).
	Stored  *kstorage.Report
	Removed *kstorage.RemovedCatalogue
	// Health are the health checks gathered (etcd-health, alarms,
	// apiservers-ready, certificates).
	Health []Check
	// Leaders are the hosts whose controller-manager or scheduler holds
	// its leader lease (when the lease names a host): their controllers
	// are upgraded last.
	Leaders []string
}

// ComponentPlan is one component on one host before and after.
type ComponentPlan struct {
	Component   string `json:"component"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// FromImage and ToImage are the static pod's images; empty for a
	// kubelet (a binary on the host).
	FromImage string `json:"fromImage,omitempty"`
	ToImage   string `json:"toImage,omitempty"`
	// FlagChanges are the manifest flags that change beyond the image
	// (always an array; FlagsKnown false when Steward does not know the
	// target minor's changes).
	FlagChanges []FlagChange `json:"flagChanges"`
	FlagsKnown  bool         `json:"flagsKnown"`
	// Changes is false when the component already runs the target.
	Changes bool `json:"changes"`
}

// HostPlan is one host's components.
type HostPlan struct {
	Host       string          `json:"host"`
	Components []ComponentPlan `json:"components"`
}

// EtcdStep says whether etcd moves first.
type EtcdStep struct {
	// Running is the oldest version an etcd member runs.
	Running string `json:"running"`
	// TestedWith is the etcd release the target is tested with.
	TestedWith string `json:"testedWith"`
	// Needed: etcd is upgraded first, to UpgradeTo, by an etcd upgrade
	// plan in the same Kubernetes upgrade.
	Needed    bool   `json:"needed"`
	UpgradeTo string `json:"upgradeTo,omitempty"`
	Message   string `json:"message"`
}

// Step is one step of what apply will do, named in StarlingX's spirit.
type Step struct {
	State       string   `json:"state"`
	Host        string   `json:"host,omitempty"`
	Components  []string `json:"components,omitempty"`
	Description string   `json:"description"`
}

// Plan is the dry run of an upgrade to Target.
type Plan struct {
	// From are the versions running (oldest first).
	From []string `json:"from"`
	To   string   `json:"to"`
	// Path are the releases the upgrade goes through, one per minor.
	Path  []string   `json:"path"`
	Hosts []HostPlan `json:"hosts"`
	Etcd  EtcdStep   `json:"etcd"`
	// RemovedAPIs are the stored objects whose API versions the target
	// does not serve (always an array); UncheckedObjects could not be
	// read without the API server (encrypted).
	RemovedAPIs      []kstorage.RemovedUse `json:"removedAPIs"`
	UncheckedObjects int64                 `json:"uncheckedObjects"`
	Preflight        []Check               `json:"preflight"`
	Steps            []Step                `json:"steps"`
	// EmulatedVersion is the minor (1.35) every control-plane component
	// that moves to a new minor emulates until the switching-emulated-
	// version step (KEP-4330's --emulated-version): the old minor's APIs,
	// features and storage versions on the new binaries, so that the old
	// binaries read everything written meanwhile. Empty when no component
	// changes minor (a patch upgrade).
	EmulatedVersion string `json:"emulatedVersion,omitempty"`
}

// TargetOf checks a target against the catalogue: a parseable version
// that Steward knows.
func TargetOf(target string) (Version, Semver, error) {
	tv, err := Parse(target)
	if err != nil {
		return Version{}, Semver{}, refusal.New(ErrNotInCatalogue, "target %q is not a Kubernetes version: give vMAJOR.MINOR.PATCH, one of %s", target, strings.Join(KnownNames(), ", "))
	}
	k, ok := Lookup(tv.String())
	if !ok {
		return Version{}, Semver{}, refusal.New(ErrNotInCatalogue, "Kubernetes %s is not in Steward's catalogue of versions (known: %s): pick one of those", tv, strings.Join(KnownNames(), ", "))
	}
	return k, tv, nil
}

// BuildPlan computes the dry run. Its error is a target that is not in
// the catalogue, or no component found; every other problem is a failed
// pre-flight check in the plan (Refusal).
func BuildPlan(in Inputs) (*Plan, error) {
	k, tv, err := TargetOf(in.Target)
	if err != nil {
		return nil, err
	}
	if len(in.Instances) == 0 {
		return nil, refusal.New(ErrNothingRuns, "no Kubernetes component found: no static pod labelled component=kube-apiserver, kube-controller-manager or kube-scheduler and no node")
	}
	p := &Plan{To: k.Version, From: []string{}, RemovedAPIs: []kstorage.RemovedUse{}, Hosts: []HostPlan{}, Steps: []Step{}, Preflight: []Check{}}
	ps, _ := parseAll(in.Instances)
	from := map[string]Semver{}
	var oldestAPI *Semver
	for _, x := range ps {
		from[x.v.String()] = x.v
		if x.Component == APIServer && (oldestAPI == nil || x.v.Compare(*oldestAPI) < 0) {
			v := x.v
			oldestAPI = &v
		}
	}
	for v := range from {
		p.From = append(p.From, v)
	}
	sort.Slice(p.From, func(i, j int) bool { return from[p.From[i]].Compare(from[p.From[j]]) < 0 })
	if oldestAPI != nil {
		p.Path = Path(*oldestAPI, tv)
	}
	if p.Path == nil {
		p.Path = []string{}
	}

	// Per host and component, before and after.
	changes, flagsKnown := FlagChanges(tv.Minor)
	hosts := map[string]*HostPlan{}
	for _, x := range in.Instances {
		h := hosts[x.Host]
		if h == nil {
			h = &HostPlan{Host: x.Host}
			hosts[x.Host] = h
		}
		cp := ComponentPlan{Component: x.Component, FromVersion: x.Version, ToVersion: k.Version, FromImage: x.Image, FlagChanges: []FlagChange{}, FlagsKnown: true}
		if x.Component != Kubelet {
			cp.ToImage = KeepRepository(x.Image, k.Images[x.Component])
		}
		v, err := Parse(x.Version)
		cp.Changes = err != nil || v.Compare(tv) != 0 || cp.FromImage != cp.ToImage
		if cp.Changes && x.Component != Kubelet && (err != nil || v.Minor != tv.Minor) {
			cp.FlagsKnown = flagsKnown
			for _, c := range changes {
				if c.Component == x.Component && x.Flags[c.Flag] == c.From {
					cp.FlagChanges = append(cp.FlagChanges, c)
				}
			}
			// The new minor's binary first emulates the old minor.
			emu := EmulatedMinor(tv)
			cp.FlagChanges = append(cp.FlagChanges, FlagChange{Component: x.Component, Flag: EmulatedVersionFlag, From: x.Flags[EmulatedVersionFlag], To: emu})
			p.EmulatedVersion = emu
		}
		h.Components = append(h.Components, cp)
	}
	for _, h := range hosts {
		sort.SliceStable(h.Components, func(i, j int) bool {
			return componentIndex(h.Components[i].Component) < componentIndex(h.Components[j].Component)
		})
		p.Hosts = append(p.Hosts, *h)
	}
	sort.Slice(p.Hosts, func(i, j int) bool { return p.Hosts[i].Host < p.Hosts[j].Host })

	// Pre-flight: skew now, the path, the kubelets.
	targetViol := CheckTarget(in.Instances, tv)
	p.Preflight = append(p.Preflight, violationsCheck("skew", CheckSkew(in.Instances), ErrSkew,
		"every component within the version skew policy"))
	var path, kubelets []Violation
	for _, v := range targetViol {
		if errors.Is(v, ErrKubeletTooOld) {
			kubelets = append(kubelets, v)
		} else {
			path = append(path, v)
		}
	}
	p.Preflight = append(p.Preflight, violationsCheck("path", path, ErrSkippedMinor,
		fmt.Sprintf("one minor at a time: %s", strings.Join(append(append([]string{}, p.From...), "->", k.Version), " "))))
	p.Preflight = append(p.Preflight, violationsCheck("kubelets", kubelets, ErrKubeletTooOld,
		fmt.Sprintf("every kubelet within three minors of %s", k.Version)))

	// Removed APIs still stored.
	p.Preflight = append(p.Preflight, p.removedCheck(in, tv))

	// The etcd step.
	p.Etcd = etcdStep(in, k)
	p.Preflight = append(p.Preflight, Check{Name: "etcd-version", Result: Pass, Message: p.Etcd.Message})

	p.Preflight = append(p.Preflight, in.Health...)
	p.Steps = steps(p, in.Leaders)
	return p, nil
}

func violationsCheck(name string, vs []Violation, kind error, ok string) Check {
	if len(vs) == 0 {
		return Check{Name: name, Result: Pass, Message: ok}
	}
	var msgs []string
	for _, v := range vs {
		msgs = append(msgs, v.Message)
	}
	k := kind
	if vs[0].Kind != nil {
		k = vs[0].Kind
	}
	return Check{Name: name, Result: Fail, Message: strings.Join(msgs, "; "), Kind: k}
}

func (p *Plan) removedCheck(in Inputs, tv Semver) Check {
	c := Check{Name: "removed-apis"}
	if in.Stored == nil || in.Removed == nil {
		c.Result, c.Kind = Fail, ErrRemovedAPIStored
		c.Message = "the storage-version inventory was not read: nothing says the target can read every stored object"
		return c
	}
	rep := *in.Stored
	rep.Resources = append([]kstorage.ResourceReport(nil), in.Stored.Resources...)
	for i := range rep.Resources {
		rep.Resources[i].Versions = append([]kstorage.VersionReport(nil), rep.Resources[i].Versions...)
	}
	if err := rep.CheckRemoved(in.Removed, tv.MinorString()); err != nil {
		c.Result, c.Kind, c.Message = Fail, ErrRemovedAPIStored, err.Error()
		return c
	}
	p.RemovedAPIs = rep.RemovedAPIs.Uses
	p.UncheckedObjects = rep.RemovedAPIs.UncheckedObjects
	return RemovedCheck(p.RemovedAPIs, tv)
}

// RemovedCheck is the removed-apis check of the stored uses found.
func RemovedCheck(uses []kstorage.RemovedUse, tv Semver) Check {
	c := Check{Name: "removed-apis", Result: Pass, Message: fmt.Sprintf("no object stored in an API version %s does not serve", tv.MinorString())}
	if len(uses) == 0 {
		return c
	}
	var msgs []string
	for _, u := range uses {
		msgs = append(msgs, describeUse(u))
	}
	c.Result, c.Kind = Fail, ErrRemovedAPIStored
	c.Message = fmt.Sprintf("%s no longer serves what is stored: %s: rewrite those objects in their replacement version through the API server (storage migration) first",
		tv, strings.Join(msgs, ", "))
	return c
}

func etcdStep(in Inputs, k Version) EtcdStep {
	s := EtcdStep{TestedWith: k.EtcdVersion}
	var oldest *semver.Version
	for _, v := range in.EtcdVersions {
		sv, err := semver.NewVersion(strings.TrimPrefix(v, "v"))
		if err != nil {
			continue
		}
		if oldest == nil || sv.LessThan(*oldest) {
			oldest = sv
		}
	}
	need := semver.New(k.EtcdVersion)
	if oldest == nil {
		s.Message = fmt.Sprintf("etcd's version not read; %s is tested with etcd %s", k.Version, k.EtcdVersion)
		return s
	}
	s.Running = oldest.String()
	if !oldest.LessThan(*need) {
		s.Message = fmt.Sprintf("etcd %s runs; %s is tested with etcd %s: no etcd step", s.Running, k.Version, k.EtcdVersion)
		return s
	}
	s.Needed, s.UpgradeTo = true, k.EtcdVersion
	if in.Etcd != nil {
		if m, ok := in.Etcd.Minor(fmt.Sprintf("%d.%d", need.Major, need.Minor)); ok {
			if l, err := semver.NewVersion(m.Latest); err == nil && !l.LessThan(*need) {
				s.UpgradeTo = l.String()
			}
		}
	}
	s.Message = fmt.Sprintf("etcd %s runs, older than etcd %s that %s is tested with: etcd is upgraded to %s first (an etcd upgrade plan, rolling, before any Kubernetes component)",
		s.Running, k.EtcdVersion, k.Version, s.UpgradeTo)
	return s
}

// The per-plan states, StarlingX's (upgrade-started, upgrading-first-
// master, ..., upgrading-kubelets, upgrade-complete) for Steward's
// shape: the control plane one host at a time, then the kubelets.
const (
	StepStarted        = "started"
	StepUpgradingEtcd  = "upgrading-etcd"
	StepKubelets       = "upgrading-kubelets"
	StepControllers    = "upgrading-controllers"
	StepStorageMigrate = "migrating-storage"
	StepComplete       = "complete"
	// StepSwitchEmulation removes --emulated-version from every
	// component's manifest: the new minor's APIs and features switched
	// on. It is the plan's point of no return: from its start on, the new
	// API servers may write what the old minor cannot read (objects of
	// APIs and fields it does not know), so kube rollback refuses.
	StepSwitchEmulation = "switching-emulated-version"
)

// EmulatedVersionFlag is the control-plane components' flag of KEP-4330
// (kube-apiserver, kube-controller-manager and kube-scheduler accept it
// from 1.31 on; v1.36.3 accepts kube=1.33..1.36).
const EmulatedVersionFlag = "emulated-version"

func minorOf(v string) string {
	if s, err := Parse(v); err == nil {
		return s.MinorString()
	}
	return v
}

// EmulatedMinor is the minor a component moving to target emulates
// first: the one before it ("1.35" for v1.36.3).
func EmulatedMinor(target Semver) string {
	return fmt.Sprintf("%d.%d", target.Major, target.Minor-1)
}

// ordinals name the control-plane steps: upgrading-first-control-plane...
var ordinals = []string{"first", "second", "third", "fourth", "fifth", "sixth", "seventh"}

// ControlPlaneState is the state of upgrading the i-th (0-based) host's
// control plane.
func ControlPlaneState(i int) string {
	if i < len(ordinals) {
		return "upgrading-" + ordinals[i] + "-control-plane"
	}
	return fmt.Sprintf("upgrading-control-plane-%d", i+1)
}

// FailedState is the failed form of a state.
func FailedState(state string) string { return state + "-failed" }

// steps is what apply does, in the order that keeps clients working:
// etcd when needed; each host's API server, one at a time (never two
// down), the API servers first so that no controller-manager or
// scheduler is ever newer than an API server; then each host's
// controller-manager and scheduler, the hosts of leaders last (one
// leader change each, not one per host); then the storage migration.
// Kubelets stay where they are (apply does not move them yet: within the
// skew policy, up to three minors older than the API servers).
func steps(p *Plan, leaders []string) []Step {
	out := []Step{{State: StepStarted, Description: "pre-flight checks passed; plan recorded"}}
	if p.Etcd.Needed {
		out = append(out, Step{State: StepUpgradingEtcd, Description: fmt.Sprintf("etcd upgraded to %s (an etcd upgrade plan, one member at a time)", p.Etcd.UpgradeTo)})
	}
	changes := func(h HostPlan, comp string) bool {
		for _, c := range h.Components {
			if c.Component == comp && c.Changes {
				return true
			}
		}
		return false
	}
	i := 0
	for _, h := range p.Hosts {
		if !changes(h, APIServer) {
			continue
		}
		out = append(out, Step{State: ControlPlaneState(i), Host: h.Host, Components: []string{APIServer},
			Description: fmt.Sprintf("host %s: kube-apiserver to %s: drained (its /readyz fails, the balancer stops sending to it), its manifest rewritten, ready at its own address before the next", h.Host, p.To)})
		i++
	}
	hosts := append([]HostPlan(nil), p.Hosts...)
	isLeader := func(h string) bool {
		for _, l := range leaders {
			if l == h {
				return true
			}
		}
		return false
	}
	sort.SliceStable(hosts, func(a, b int) bool { return !isLeader(hosts[a].Host) && isLeader(hosts[b].Host) })
	for _, h := range hosts {
		var comps []string
		for _, c := range []string{ControllerManager, Scheduler} {
			if changes(h, c) {
				comps = append(comps, c)
			}
		}
		if len(comps) == 0 {
			continue
		}
		lead := ""
		if isLeader(h.Host) {
			lead = " (a leader's host: last)"
		}
		out = append(out, Step{State: StepControllers, Host: h.Host, Components: comps,
			Description: fmt.Sprintf("host %s: %s to %s, each running the new image before the next%s", h.Host, strings.Join(comps, ", "), p.To, lead)})
	}
	if p.EmulatedVersion != "" {
		out = append(out, Step{State: StepSwitchEmulation, Components: append([]string(nil), ControlPlane...),
			Description: fmt.Sprintf("the point of no return: --%s=%s removed from every component, each API server one at a time (never two down), then the controller-managers and schedulers: %s's APIs and features on; no rollback after this step starts",
				EmulatedVersionFlag, p.EmulatedVersion, minorOf(p.To))})
	}
	out = append(out, Step{State: StepStorageMigrate, Description: "storage migration of every resource whose storage version changed"},
		Step{State: StepComplete, Description: "every control-plane component on every host runs " + p.To})
	return out
}

// Failed are the checks that did not pass.
func (p *Plan) Failed() []Check {
	var out []Check
	for _, c := range p.Preflight {
		if c.Result != Pass {
			out = append(out, c)
		}
	}
	return out
}

// Refusal is nil when every pre-flight check passed, else one refusal
// naming each failed check (its kind the first one's).
func (p *Plan) Refusal() error {
	failed := p.Failed()
	if len(failed) == 0 {
		return nil
	}
	var msgs []string
	for _, c := range failed {
		msgs = append(msgs, c.Name+": "+c.Message)
	}
	kind := failed[0].Kind
	if kind == nil {
		kind = ErrUnhealthy
	}
	return refusal.New(kind, "upgrade to %s refused by pre-flight (nothing changed): %s", p.To, strings.Join(msgs, "; "))
}
