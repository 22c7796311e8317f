package kubeupgrade

// The kube-rollback plan kind (registered in cluster.PlanKinds with
// kube-upgrade): `steward kube rollback` brings every component a
// kube-upgrade plan moved back to the static pod manifest its host's
// agent kept before the plan's first write of it, and loses no object
// written meanwhile: until the upgrade's point of no return every moved
// component ran the new binary with --emulated-version of the old minor
// (KEP-4330), which writes nothing the old binaries cannot read.
//
// Invariants, enforced here:
//   - refused, nothing changed, when there is no kube-upgrade plan to
//     roll back, when another plan is open, when the upgrade passed its
//     point of no return (PointOfNoReturn: its switching-emulated-version
//     or migrating-storage step started, or it is complete), when etcd is
//     unhealthy, or when more than one API server is down (or the one
//     down is not one the rollback restores);
//   - the upgrade plan is stopped (aborted) before the rollback plan is
//     saved, so the two never run together;
//   - the order going down keeps the skew policy: controller-managers and
//     schedulers first (never newer than an API server), then the API
//     servers one at a time, never two down (the others ready before one
//     stops), a down one first;
//   - each component gets exactly the kept bytes; one whose manifest
//     already holds them is not written again (a resumed rollback
//     restarts nothing twice), one the upgrade never wrote (nothing kept)
//     is left alone;
//   - the kept copies are pruned only by the last step, once every
//     restored component runs its old version; then the upgrade plan is
//     marked rolled back.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// KindKubeRollback is the plan kind of a Kubernetes rollback.
const KindKubeRollback plan.Kind = "kube-rollback"

// The rollback's steps, in StarlingX's spirit.
const (
	StepRollbackStarted        = "rollback-started"
	StepRollingBackControllers = "rolling-back-controllers"
	StepRollbackComplete       = "rollback-complete"
)

// RollbackControlPlaneState is the state of rolling back the i-th
// (0-based) API server: rolling-back-first-control-plane, ...
func RollbackControlPlaneState(i int) string {
	return "rolling-back-" + strings.TrimPrefix(kubeversion.ControlPlaneState(i), "upgrading-")
}

func isRollbackControlPlaneStep(kind string) bool {
	return strings.HasPrefix(kind, "rolling-back-") && kind != StepRollingBackControllers
}

// PointManifestRestored: after a component's kept manifest was written
// back, before the executor waits for the component to run it.
const PointManifestRestored = "kube-manifest-restored"

// Refusals of kube rollback (nothing changed).
var (
	// ErrNoUpgradeToRollBack: no kube-upgrade plan is there to roll back.
	ErrNoUpgradeToRollBack = errors.New("no kube-upgrade plan to roll back")
	// ErrPointOfNoReturn: the upgrade passed its point of no return.
	ErrPointOfNoReturn = errors.New("past the point of no return")
	// ErrPlanOpen: a plan of another kind is open.
	ErrPlanOpen = errors.New("a plan of another kind is open")
	// ErrRollbackOpen: a kube-rollback plan is open.
	ErrRollbackOpen = errors.New("a kube-rollback plan is open")
	// ErrPlanRunning: a process runs a plan in this Steward directory
	// (plan.ErrLocked).
	ErrPlanRunning = fmt.Errorf("%w", plan.ErrLocked)
)

// Component states in a rollback.
const (
	ComponentRollingBack = "rolling-back"
	ComponentRolledBack  = "rolled-back"
)

// RollbackPayload is what a kube-rollback plan records about itself.
type RollbackPayload struct {
	// Of is the kube-upgrade plan rolled back (plan.Plan.Of too).
	Of string `json:"of"`
	// From is the version the upgrade moved to; To the versions the
	// restored components go back to.
	From string   `json:"from"`
	To   []string `json:"to"`
	// EtcdUpgradedTo is the etcd version the upgrade moved etcd to,
	// which the rollback leaves as it is ("" when it did not move it).
	EtcdUpgradedTo string `json:"etcdUpgradedTo,omitempty"`
	Kubeconfig     string `json:"kubeconfig,omitempty"`
	// Components go back to their kept manifests.
	Components []RestoredComponent `json:"components"`
	// Untouched are the upgrade's components of which nothing was kept
	// (the upgrade never wrote them): left alone ("HOST COMPONENT").
	Untouched []string `json:"untouched"`
	// APIHosts are the hosts whose API server the upgrade planned (each
	// counts as down while its mirror pod is missing); Hosts every host
	// whose agent may have kept manifests for the upgrade.
	APIHosts []string `json:"apiHosts"`
	Hosts    []string `json:"hosts"`
}

// RestoredComponent is one component the rollback gives back its kept
// manifest.
type RestoredComponent struct {
	Host      string `json:"host"`
	Component string `json:"component"`
	// FromImage is the image it ran when the rollback was planned.
	FromImage string `json:"fromImage"`
	// ToVersion and ToImage are the kept manifest's; ToEmulated its
	// --emulated-version (none before an upgrade by Steward).
	ToVersion  string `json:"toVersion"`
	ToImage    string `json:"toImage"`
	ToEmulated string `json:"toEmulated,omitempty"`
	// Kept is the kept manifest, byte for byte, as the agent answered it.
	Kept []byte `json:"kept"`
}

func (pl *RollbackPayload) restored(host, comp string) (RestoredComponent, bool) {
	for _, c := range pl.Components {
		if c.Host == host && c.Component == comp {
			return c, true
		}
	}
	return RestoredComponent{}, false
}

// PointOfNoReturn is the upgrade's step from whose start on a rollback is
// refused (nil when none started): switching-emulated-version (the new
// minor's APIs and features on: objects the old minor cannot read may be
// written), else migrating-storage (objects rewritten), else complete
// (the kept manifests pruned). A step counts as started once it left
// pending (running, failed or done).
func PointOfNoReturn(up *plan.Plan) *plan.Step {
	for i := range up.Steps {
		s := &up.Steps[i]
		switch s.Kind {
		case kubeversion.StepSwitchEmulation, kubeversion.StepStorageMigrate, kubeversion.StepComplete:
			if s.State != plan.Pending {
				return s
			}
		}
	}
	return nil
}

// RollbackOf judges the latest plan: the kube-upgrade plan to roll back,
// or the refusal (one message, nothing changed).
func RollbackOf(latest *plan.Plan) (*plan.Plan, error) {
	switch {
	case latest == nil:
		return nil, refusal.New(ErrNoUpgradeToRollBack, "no kube-upgrade plan to roll back: there is no plan")
	case latest.Kind == KindKubeRollback && latest.Active():
		return nil, refusal.New(ErrRollbackOpen, "kube-rollback plan %s (of %s) is %s at %s", latest.ID, latest.Of, latest.State, RollbackState(latest))
	case latest.Kind != KindKubeUpgrade && latest.Active():
		return nil, refusal.New(ErrPlanOpen, "%s plan %s is %s: a Kubernetes rollback starts only once no other plan is open", latest.Kind, latest.ID, latest.State)
	case latest.Kind == KindKubeRollback:
		return nil, refusal.New(ErrNoUpgradeToRollBack, "no kube-upgrade plan to roll back: the latest plan is kube-rollback plan %s (%s) of %s", latest.ID, latest.State, latest.Of)
	case latest.Kind != KindKubeUpgrade:
		return nil, refusal.New(ErrNoUpgradeToRollBack, "no kube-upgrade plan to roll back: the latest plan is %s plan %s (%s)", latest.Kind, latest.ID, latest.State)
	case latest.State == plan.RolledBack:
		return nil, refusal.New(ErrNoUpgradeToRollBack, "no kube-upgrade plan to roll back: kube-upgrade plan %s was rolled back already", latest.ID)
	}
	pl, err := plan.PayloadOf[Payload](latest)
	if err != nil {
		return nil, err
	}
	if latest.State == plan.Done {
		return nil, refusal.New(ErrPointOfNoReturn, "kube-upgrade plan %s is complete, past its point of no return: every component runs %s with its own APIs and features and the manifests kept before it are gone; Kubernetes supports no downgrade of a minor once its APIs and features were on (objects may be stored that the older minor cannot read)", latest.ID, pl.To)
	}
	if s := PointOfNoReturn(latest); s != nil {
		why := "objects may have been written that the older minor cannot read"
		if s.Kind == kubeversion.StepSwitchEmulation {
			why = fmt.Sprintf("the API servers may run without --%s=%s and %s", kubeversion.EmulatedVersionFlag, pl.EmulatedVersion, why)
		}
		return nil, refusal.New(ErrPointOfNoReturn, "kube-upgrade plan %s passed its point of no return: step %d (%s) is %s: %s; finishing the upgrade is the way on", latest.ID, s.Number(), s.Kind, s.State, why)
	}
	if pl.EmulatedVersion == "" && crossesMinor(pl) {
		return nil, refusal.New(ErrPointOfNoReturn, "kube-upgrade plan %s moved components to %s without --%s (a plan of an older Steward): they may have written objects the older minor cannot read; finishing the upgrade is the way on", latest.ID, pl.To, kubeversion.EmulatedVersionFlag)
	}
	return latest, nil
}

func crossesMinor(pl Payload) bool {
	for _, c := range pl.Components {
		a, errA := kubeversion.Parse(c.FromVersion)
		b, errB := kubeversion.Parse(c.ToVersion)
		if errA != nil || errB != nil || a.Minor != b.Minor || a.Major != b.Major {
			return true
		}
	}
	return false
}

// rollbackAdmission admits a kube-rollback whatever the latest plan
// (RollbackOf judges it) unless a process runs a plan here.
var rollbackAdmission = plan.Admission{
	NeedPlan: true,
	Locked:   refusal.New(ErrPlanRunning, "a Steward process is running a plan in this directory; a rollback never runs beside it: stop it, then roll back"),
	Refuse:   func(*plan.Plan) error { return nil },
}

// rollbackSubject admits a rollback on the store: no process running a
// plan, a kube-upgrade plan to roll back (RollbackOf).
func rollbackSubject(st *plan.Store) (*plan.Plan, error) {
	latest, err := plan.Admit(st, rollbackAdmission)
	if errors.Is(err, plan.ErrNoPlan) {
		return RollbackOf(nil)
	}
	if err != nil {
		return nil, err
	}
	if latest.Kind == KindKubeRollback && latest.State == plan.Aborted && latest.Of != "" {
		// An aborted rollback: its upgrade may be rolled back again
		// (what is back already is not written again).
		up, err := st.Get(latest.Of)
		if err != nil {
			return nil, fmt.Errorf("kube-rollback plan %s (aborted): its kube-upgrade plan %s: %w", latest.ID, latest.Of, err)
		}
		return RollbackOf(up)
	}
	return RollbackOf(latest)
}

// NewRollback plans the rollback of kube-upgrade plan up (judged by
// RollbackOf): etcd healthy, at most one API server down and that one
// restored; each planned component whose manifest the host's agent kept
// goes back to it. Nothing is changed or saved.
func NewRollback(ctx context.Context, env Env, up *plan.Plan, now time.Time) (*plan.Plan, error) {
	pl, err := plan.PayloadOf[Payload](up)
	if err != nil {
		return nil, err
	}
	if err := env.EtcdHealth(ctx); err != nil {
		return nil, refusal.New(kubeversion.ErrUnhealthy, "etcd beneath: %v (the rollback restarts the API servers above it)", err)
	}
	run, err := env.Running(ctx)
	if err != nil {
		return nil, err
	}
	rb := RollbackPayload{Of: up.ID, From: pl.To, To: []string{}, Kubeconfig: pl.Kubeconfig, Components: []RestoredComponent{}, Untouched: []string{}, APIHosts: pl.apiHosts(), Hosts: []string{}}
	if rb.APIHosts == nil {
		rb.APIHosts = []string{}
	}
	for _, s := range up.Steps {
		if s.Kind == kubeversion.StepUpgradingEtcd && s.State != plan.Pending {
			rb.EtcdUpgradedTo = pl.EtcdUpgradeTo
		}
	}
	for _, pc := range pl.Components {
		if !slices.Contains(rb.Hosts, pc.Host) {
			rb.Hosts = append(rb.Hosts, pc.Host)
		}
		b, ok, err := env.Kept(ctx, pc.Host, pc.Component, up.ID)
		if err != nil {
			return nil, fmt.Errorf("host %s: read the %s manifest kept before plan %s: %w", pc.Host, pc.Component, up.ID, err)
		}
		if !ok {
			rb.Untouched = append(rb.Untouched, pc.Host+" "+pc.Component)
			continue
		}
		rc, err := restoredFrom(pc.Host, pc.Component, b)
		if err != nil {
			return nil, refusal.New(ErrManifest, "host %s: the %s manifest kept before plan %s: %v: nothing to bring back there; fix it in the agent's %s directory first", pc.Host, pc.Component, up.ID, err, "kube-manifests-kept")
		}
		rc.FromImage = run.Pods[pc.Host+"/"+pc.Component].Image
		if !slices.Contains(rb.To, rc.ToVersion) {
			rb.To = append(rb.To, rc.ToVersion)
		}
		rb.Components = append(rb.Components, rc)
	}
	// API servers: at most one down, and that one restored (first).
	var down []string
	seen := map[string]bool{}
	for _, a := range run.APIServers {
		seen[a.Host] = true
		if _, ready, err := env.APIServer(ctx, a); err != nil || !ready {
			down = append(down, a.Host)
		}
	}
	for _, h := range rb.APIHosts {
		if !seen[h] {
			down = append(down, h)
		}
	}
	switch {
	case len(down) > 1:
		return nil, refusal.New(kubeversion.ErrUnhealthy, "the API servers of hosts %s are not ready: the rollback restarts them one at a time and never stops one while another is down; bring all but one back first", strings.Join(down, ", "))
	case len(down) == 1:
		if _, ok := rb.restored(down[0], kubeversion.APIServer); !ok {
			return nil, refusal.New(kubeversion.ErrUnhealthy, "host %s: its API server is not ready and the rollback does not restore it (nothing of it was kept for plan %s): bring it back first", down[0], up.ID)
		}
	}

	p := &plan.Plan{ID: plan.NewID(KindKubeRollback, now), Kind: KindKubeRollback, State: plan.Pending, Of: up.ID, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	if err := plan.SetPayload(p, rb); err != nil {
		return nil, err
	}
	add := func(kind, host, desc string) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: kind, Member: host, Version: strings.Join(rb.To, ","), Description: desc, State: plan.Pending})
	}
	etcd := ""
	if rb.EtcdUpgradedTo != "" {
		etcd = fmt.Sprintf("; etcd stays at %s (its rollback is the etcd rollback's)", rb.EtcdUpgradedTo)
	}
	add(StepRollbackStarted, "", fmt.Sprintf("kube-upgrade plan %s stopped; %d components go back to the manifests kept before it, %d untouched left alone%s", up.ID, len(rb.Components), len(rb.Untouched), etcd))
	// Going down: the controllers first, last host first.
	hosts := slices.Clone(rb.Hosts)
	slices.Reverse(hosts)
	for _, h := range hosts {
		var comps []string
		for _, c := range []string{kubeversion.Scheduler, kubeversion.ControllerManager} {
			if _, ok := rb.restored(h, c); ok {
				comps = append(comps, c)
			}
		}
		if len(comps) > 0 {
			add(StepRollingBackControllers, h, fmt.Sprintf("host %s: %s back to their kept manifests, each running its old image before the next", h, strings.Join(comps, ", ")))
		}
	}
	// Then the API servers: a down one first, then the last host first.
	apis := slices.Clone(down)
	for _, h := range hosts {
		if _, ok := rb.restored(h, kubeversion.APIServer); ok && !slices.Contains(apis, h) {
			apis = append(apis, h)
		}
	}
	for i, h := range apis {
		rc, _ := rb.restored(h, kubeversion.APIServer)
		add(RollbackControlPlaneState(i), h, fmt.Sprintf("host %s: kube-apiserver back to %s (its kept manifest), the others ready before it stops, ready at its own address before the next", h, rc.ToVersion))
	}
	add(StepRollbackComplete, "", "every restored component runs its kept manifest; the kept manifests removed; the upgrade plan marked rolled back")
	return p, nil
}

// restoredFrom reads a kept manifest: its component container's image
// (the version is its tag) and --emulated-version.
func restoredFrom(host, comp string, kept []byte) (RestoredComponent, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(kept, &pod); err != nil {
		return RestoredComponent{}, err
	}
	if len(pod.Spec.Containers) == 0 {
		return RestoredComponent{}, errors.New("no container")
	}
	ctr := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == comp {
			ctr = &pod.Spec.Containers[i]
		}
	}
	flags := Flags(append(append([]string{}, ctr.Command...), ctr.Args...))
	return RestoredComponent{Host: host, Component: comp, ToVersion: ImageTag(ctr.Image), ToImage: ctr.Image,
		ToEmulated: flags[kubeversion.EmulatedVersionFlag], Kept: kept}, nil
}

// RollbackOptions are kube rollback's inputs beyond the cluster.
type RollbackOptions struct {
	// Kubeconfig overrides the one the upgrade plan recorded.
	Kubeconfig string
	// DryRun plans the rollback and returns it, changing nothing.
	DryRun bool
}

// Rollback plans the rollback of the latest kube-upgrade plan (refusing
// what RollbackOf and NewRollback refuse, nothing changed), and unless
// o.DryRun stops the upgrade plan (aborted), saves the rollback plan and
// runs it. It returns the rollback plan (nil when refused).
func Rollback(ctx context.Context, c *cluster.Cluster, o RollbackOptions) (*plan.Plan, error) {
	up, err := rollbackSubject(c.Plans())
	if err != nil {
		return nil, err
	}
	pl, err := plan.PayloadOf[Payload](up)
	if err != nil {
		return nil, err
	}
	kc := o.Kubeconfig
	if kc == "" {
		kc = pl.Kubeconfig
	}
	if kc == "" {
		return nil, fmt.Errorf("kube-upgrade plan %s records no kubeconfig and none was given", up.ID)
	}
	cfg, err := RESTConfig(kc)
	if err != nil {
		return nil, err
	}
	env, err := NewEnv(c, cfg, kc)
	if err != nil {
		return nil, err
	}
	rb, err := NewRollback(ctx, env, up, time.Now())
	if err != nil || o.DryRun {
		return rb, err
	}
	rpl, err := plan.PayloadOf[RollbackPayload](rb)
	if err != nil {
		return nil, err
	}
	rpl.Kubeconfig = kc
	if err := plan.SetPayload(rb, rpl); err != nil {
		return nil, err
	}
	if up.Active() {
		if _, err := plan.RequestAbort(ctx, c.Plans(), up.ID); err != nil {
			return nil, fmt.Errorf("stop kube-upgrade plan %s: %w", up.ID, err)
		}
		c.Progress.Say("kube-upgrade plan %s stopped (aborted)", up.ID)
	}
	if err := c.Plans().Save(ctx, rb); err != nil {
		return nil, err
	}
	return rb, RunRollback(ctx, c, rb.ID)
}

// RunRollback runs (or resumes) kube-rollback plan id from its first step
// not done; once done, the upgrade plan is marked rolled back.
func RunRollback(ctx context.Context, c *cluster.Cluster, id string) error {
	p, err := c.Plans().Get(id)
	if err != nil {
		return err
	}
	pl, err := plan.PayloadOf[RollbackPayload](p)
	if err != nil {
		return err
	}
	cfg, err := RESTConfig(pl.Kubeconfig)
	if err != nil {
		return err
	}
	env, err := NewEnv(c, cfg, pl.Kubeconfig)
	if err != nil {
		return err
	}
	if err := plan.Run(ctx, c.Plans(), id, &RollbackExecutor{Executor: Executor{Env: env, Progress: c.Progress}}, c.Progress); err != nil {
		return err
	}
	return markRolledBack(ctx, c.Plans(), id)
}

// markRolledBack marks the upgrade plan a done rollback undid, and saves
// the rollback again so that it stays the latest plan.
func markRolledBack(ctx context.Context, st *plan.Store, id string) error {
	p, err := st.Get(id)
	if err != nil || p.State != plan.Done || p.Of == "" {
		return err
	}
	up, err := st.Get(p.Of)
	if err != nil {
		return err
	}
	if up.State != plan.RolledBack {
		up.State = plan.RolledBack
		if err := st.Save(ctx, up); err != nil {
			return err
		}
	}
	return st.Save(ctx, p)
}

// RollbackExecutor runs the steps of a kube-rollback plan, each
// idempotent, deciding from what runs.
type RollbackExecutor struct {
	Executor
}

// Execute runs one step (plan.Executor).
func (e *RollbackExecutor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	pl, err := plan.PayloadOf[RollbackPayload](p)
	if err != nil {
		return err
	}
	switch {
	case s.Kind == StepRollbackStarted:
		return nil
	case s.Kind == StepRollingBackControllers:
		for _, comp := range []string{kubeversion.Scheduler, kubeversion.ControllerManager} {
			if rc, ok := pl.restored(s.Member, comp); ok {
				if err := e.restore(ctx, pl, rc); err != nil {
					return err
				}
			}
		}
		return nil
	case s.Kind == StepRollbackComplete:
		return e.rollbackComplete(ctx, pl)
	case isRollbackControlPlaneStep(s.Kind):
		rc, ok := pl.restored(s.Member, kubeversion.APIServer)
		if !ok {
			return nil
		}
		return e.restore(ctx, pl, rc)
	}
	return fmt.Errorf("kube-rollback plan %s: step %d: unknown step kind %q (a plan of another Steward version?)", p.ID, s.Number(), s.Kind)
}

// restoredNow says whether rc runs its kept manifest: nil when it does
// (its mirror pod with the kept image and emulation, ready; an API server
// answering /version with the kept version and /readyz 200 at its own
// address), else what it lacks.
func (e *RollbackExecutor) restoredNow(ctx context.Context, rc RestoredComponent) error {
	return runsTarget(ctx, e.Env, target{Host: rc.Host, Component: rc.Component, Image: rc.ToImage, Version: rc.ToVersion, Emulated: &rc.ToEmulated})
}

// restore gives rc its kept manifest (through the host's agent, for the
// upgrade plan: the agent keeps nothing more) unless its manifest holds
// it already; an API server only once every other is ready. Then waits
// for it to run it.
func (e *RollbackExecutor) restore(ctx context.Context, pl RollbackPayload, rc RestoredComponent) error {
	host, comp := rc.Host, rc.Component
	cur, err := e.Env.Manifest(ctx, host, comp)
	if err != nil {
		return fmt.Errorf("host %s: read the %s manifest: %w", host, comp, err)
	}
	if string(cur) == string(rc.Kept) && e.restoredNow(ctx, rc) == nil {
		e.Progress.Say("host %s: %s already back at %s", host, comp, rc.ToVersion)
		return nil
	}
	if string(cur) != string(rc.Kept) {
		if comp == kubeversion.APIServer {
			if err := e.wait(ctx, fmt.Sprintf("host %s: before kube-apiserver stops, the others ready", host), func() error {
				return e.othersReady(ctx, pl.APIHosts, host)
			}); err != nil {
				return err
			}
		}
		if err := e.Env.WriteManifest(ctx, host, comp, pl.Of, rc.Kept); err != nil {
			return fmt.Errorf("host %s: write back the kept %s manifest: %w", host, comp, err)
		}
		e.Progress.Say("host %s: %s manifest back to the one kept before plan %s (%s)", host, comp, pl.Of, rc.ToImage)
	}
	crashpoint.Hit(PointManifestRestored + ":" + host + "/" + comp)
	start := time.Now()
	if err := e.wait(ctx, fmt.Sprintf("host %s: %s back at %s", host, comp, rc.ToVersion), func() error {
		return e.restoredNow(ctx, rc)
	}); err != nil {
		return err
	}
	e.Progress.Say("host %s: %s runs %s again, ready (%.1fs after its manifest)", host, comp, rc.ToVersion, time.Since(start).Seconds())
	return nil
}

// rollbackComplete checks every restored component runs its kept
// manifest, then has every host's agent drop what it kept for the
// upgrade.
func (e *RollbackExecutor) rollbackComplete(ctx context.Context, pl RollbackPayload) error {
	var bad []error
	for _, rc := range pl.Components {
		if err := e.restoredNow(ctx, rc); err != nil {
			bad = append(bad, err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("not every component is back: %w", errors.Join(bad...))
	}
	for _, h := range pl.Hosts {
		if err := e.Env.PruneKept(ctx, h, pl.Of); err != nil {
			return fmt.Errorf("host %s: remove the manifests kept for plan %s: %w", h, pl.Of, err)
		}
	}
	return nil
}

// RollbackState is a rollback plan's state in StarlingX's words: the kind
// of its first step not done, its failed or aborted form, or
// rollback-complete.
func RollbackState(p *plan.Plan) string { return stateOf(p, StepRollbackComplete) }

// RestoredState is one restored component and its state in a rollback.
type RestoredState struct {
	Host       string `json:"host"`
	Component  string `json:"component"`
	FromImage  string `json:"fromImage"`
	ToVersion  string `json:"toVersion"`
	ToImage    string `json:"toImage"`
	ToEmulated string `json:"toEmulated,omitempty"`
	State      string `json:"state"`
}

// RestoredStates are the per host and component states of a rollback:
// rolled-back once the step restoring it is done, rolling-back while it
// runs, rolling-back-failed, pending before.
func RestoredStates(p *plan.Plan) ([]RestoredState, error) {
	pl, err := plan.PayloadOf[RollbackPayload](p)
	if err != nil {
		return nil, err
	}
	out := []RestoredState{}
	for _, c := range pl.Components {
		rs := RestoredState{Host: c.Host, Component: c.Component, FromImage: c.FromImage, ToVersion: c.ToVersion, ToImage: c.ToImage, ToEmulated: c.ToEmulated, State: ComponentPending}
		for _, s := range p.Steps {
			if s.Member != c.Host {
				continue
			}
			if (c.Component == kubeversion.APIServer) != isRollbackControlPlaneStep(s.Kind) {
				continue
			}
			switch s.State {
			case plan.Done:
				rs.State = ComponentRolledBack
			case plan.Running:
				rs.State = ComponentRollingBack
			case plan.Failed:
				rs.State = kubeversion.FailedState(ComponentRollingBack)
			}
		}
		out = append(out, rs)
	}
	return out, nil
}

// RollbackView is what `steward plan show -o json|yaml` prints of a
// kube-rollback plan (and `kube rollback --dry-run -o json`).
type RollbackView struct {
	*plan.Plan
	KubeState  string          `json:"kubeState"`
	Components []RestoredState `json:"components"`
}

// ViewRollback is a rollback plan's view.
func ViewRollback(p *plan.Plan) any {
	cs, _ := RestoredStates(p)
	if cs == nil {
		cs = []RestoredState{}
	}
	return RollbackView{Plan: p, KubeState: RollbackState(p), Components: cs}
}

func showRollback(p *plan.Plan) string {
	pl, err := plan.PayloadOf[RollbackPayload](p)
	if err != nil {
		return fmt.Sprintf("%s, %s", p.Kind, RollbackState(p))
	}
	return fmt.Sprintf("kube-rollback of %s: %s back to %s, %s", pl.Of, pl.From, strings.Join(pl.To, ", "), RollbackState(p))
}

func describeRollback(p *plan.Plan) string {
	pl, err := plan.PayloadOf[RollbackPayload](p)
	if err != nil {
		return plan.DescribeKind(p)
	}
	cs, _ := RestoredStates(p)
	n := 0
	var busy []string
	for _, c := range cs {
		switch c.State {
		case ComponentRolledBack:
			n++
		case ComponentPending:
		default:
			busy = append(busy, c.Host+" "+c.Component+" "+c.State)
		}
	}
	out := fmt.Sprintf("kube-rollback plan %s (Kubernetes %s back to %s, %s, %d/%d components rolled back", p.ID, pl.From, strings.Join(pl.To, ", "), RollbackState(p), n, len(cs))
	if len(busy) > 0 {
		out += "; " + strings.Join(busy, ", ")
	}
	return out + ")"
}

// RollbackSpec is the kube-rollback kind's registration: admitted by
// RollbackOf's judgement (an open kube-upgrade plan is stopped by it);
// resumed by RunRollback; reported by KubeUpgradeInProgress.
func RollbackSpec() plan.KindSpec[*cluster.Cluster] {
	return plan.KindSpec[*cluster.Cluster]{
		Kind:      KindKubeRollback,
		Admission: rollbackAdmission,
		Resume:    RunRollback,
		Show:      showRollback,
		View:      ViewRollback,
		Describe:  describeRollback,
		Condition: CondKubeUpgradeInProgress,
	}
}
