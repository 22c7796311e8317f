package kubeupgrade

// The kube-upgrade plan's executor: each step idempotent (the engine
// calls it again after a kill, plan.Executor), deciding from what runs
// (Env.Running: the mirror pods, each API server's /version and /readyz
// at its own address) rather than from what the plan recorded, so a
// resume continues from where the hosts really are.
//
// The rules it enforces:
//   - never two API servers down: before an API server's manifest is
//     rewritten every other API server answers /readyz (waited for, up to
//     the plan's timeout; the step fails otherwise);
//   - a component is upgraded when its mirror pod names the target image
//     and its container runs it ready, and, for an API server, when it
//     answers /version with the target and /readyz with 200 at its own
//     address: only then does the next step start;
//   - a manifest is changed only through the host's agent, which keeps
//     the manifest before the plan until the plan is done (the complete
//     step prunes the kept copies);
//   - a component moved to a new minor runs with --emulated-version of
//     the old minor (KEP-4330) until the switching-emulated-version step,
//     which removes it from every manifest, API servers one at a time
//     under the same never-two-down rule, then the controller-managers
//     and schedulers: until that step starts nothing the old binaries
//     cannot read is written, so kube rollback (rollback.go) may bring
//     every kept manifest back; from its start on it refuses.

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
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
)

// Crash points of the executor (internal/crashpoint), besides the
// engine's plan-step-before:N and plan-step-after:N:
//
//   - kube-manifest-written:HOST/COMPONENT  after a host's manifest of a
//     component was written with the target image, before the executor
//     waits for the component to run it.
//   - kube-emulation-switched:HOST/COMPONENT  after a manifest lost its
//     --emulated-version (the switching-emulated-version step), before
//     the executor waits for the component to run without it.
const (
	PointManifestWritten   = "kube-manifest-written"
	PointEmulationSwitched = "kube-emulation-switched"
)

// Drain flags the executor gives an API server's manifest when it has
// none (kube-apiserver's graceful shutdown): on SIGTERM its /readyz fails
// at once and it keeps serving for ShutdownDelay, long enough for a
// balancer that checks /readyz (localkube's every 0.5 s, kubeadm's
// HAProxy guide every 2 s) to stop sending it new connections; then
// requests that still arrive get 429 with Retry-After while the in-flight
// ones finish, which client-go retries elsewhere.
const (
	ShutdownDelay = "5s"
)

// Env is what the executor reads and acts through: pkg/kubeupgrade's
// real one (client-go, each host's agent, the etcd upgrade, the storage
// migration), an in-memory one in the unit tests.
type Env interface {
	// Running is what runs now.
	Running(ctx context.Context) (*Running, error)
	// APIServer answers an API server's /version (its gitVersion) and
	// whether its /readyz says 200, asked at its own address.
	APIServer(ctx context.Context, a APIServer) (version string, ready bool, err error)
	// Manifest is a host's static pod manifest of a component.
	Manifest(ctx context.Context, host, component string) ([]byte, error)
	// WriteManifest writes it (through the host's agent) for plan id.
	WriteManifest(ctx context.Context, host, component, id string, content []byte) error
	// PruneKept removes the manifests a host's agent kept for plan id.
	PruneKept(ctx context.Context, host, id string) error
	// UpgradeEtcd upgrades the etcd cluster to version for plan id
	// (done when it runs it).
	UpgradeEtcd(ctx context.Context, id, version string) error
	// StorageHashes are discovery's storage version hash per resource.
	StorageHashes(ctx context.Context) (map[string]string, error)
	// MigrateStorage rewrites every object of the resources.
	MigrateStorage(ctx context.Context, resources []string) error
	// Kept is a host's manifest of a component as its agent kept it
	// before plan id first wrote it; ok false when nothing was kept.
	Kept(ctx context.Context, host, component, id string) (content []byte, ok bool, err error)
	// EtcdHealth is nil when every etcd member is healthy, with quorum
	// and no alarm, else what is wrong.
	EtcdHealth(ctx context.Context) error
}

// Executor runs the steps of a kube-upgrade plan.
type Executor struct {
	Env      Env
	Progress progress.Func
	// Timeout bounds each wait (a component running the target, the
	// other API servers ready); DefaultTimeout when zero.
	Timeout time.Duration
	// Poll is the period of the waits (time.Second when zero).
	Poll time.Duration
}

// DefaultTimeout bounds each wait of a step.
const DefaultTimeout = 5 * time.Minute

// Execute runs one step (plan.Executor).
func (e *Executor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return err
	}
	switch {
	case s.Kind == kubeversion.StepStarted:
		return nil
	case s.Kind == kubeversion.StepUpgradingEtcd:
		return e.Env.UpgradeEtcd(ctx, p.ID, pl.EtcdUpgradeTo)
	case isControlPlaneStep(s.Kind):
		return e.component(ctx, p.ID, pl, s.Member, kubeversion.APIServer)
	case s.Kind == kubeversion.StepControllers:
		for _, comp := range []string{kubeversion.ControllerManager, kubeversion.Scheduler} {
			if _, ok := pl.component(s.Member, comp); !ok {
				continue
			}
			if err := e.component(ctx, p.ID, pl, s.Member, comp); err != nil {
				return err
			}
		}
		return nil
	case s.Kind == kubeversion.StepSwitchEmulation:
		return e.switchEmulation(ctx, p.ID, pl)
	case s.Kind == kubeversion.StepStorageMigrate:
		return e.migrate(ctx, pl)
	case s.Kind == kubeversion.StepComplete:
		return e.complete(ctx, p.ID, pl)
	}
	return fmt.Errorf("kube-upgrade plan %s: step %d: unknown step kind %q (a plan of another Steward version?)", p.ID, s.Number(), s.Kind)
}

func isControlPlaneStep(kind string) bool {
	return strings.HasPrefix(kind, "upgrading-") && strings.HasSuffix(kind, "-control-plane") ||
		strings.HasPrefix(kind, "upgrading-control-plane-")
}

func (pl *Payload) component(host, comp string) (PlannedComponent, bool) {
	for _, c := range pl.Components {
		if c.Host == host && c.Component == comp {
			return c, true
		}
	}
	return PlannedComponent{}, false
}

// apiHosts are the hosts whose API server the plan moves.
func (pl *Payload) apiHosts() []string {
	var out []string
	for _, c := range pl.Components {
		if c.Component == kubeversion.APIServer {
			out = append(out, c.Host)
		}
	}
	return out
}

func (e *Executor) timeout() time.Duration {
	if e.Timeout > 0 {
		return e.Timeout
	}
	return DefaultTimeout
}

// wait polls f until it returns nil, ctx ends or the timeout passes (the
// last error of f then, named by what).
func (e *Executor) wait(ctx context.Context, what string, f func() error) error {
	every := e.Poll
	if every <= 0 {
		every = time.Second
	}
	deadline := time.Now().Add(e.timeout())
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, e.timeout(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(every):
		}
	}
}

// upgraded says whether comp on host runs the target: nil when it does,
// else what it lacks.
func (e *Executor) upgraded(ctx context.Context, pc PlannedComponent) error {
	return runsTarget(ctx, e.Env, target{Host: pc.Host, Component: pc.Component, Image: pc.ToImage, Version: pc.ToVersion})
}

// target is what a component must run for a step to be done.
type target struct {
	Host, Component string
	Image           string  // its mirror pod's image
	Version         string  // an API server's /version
	Emulated        *string // its --emulated-version (nil: not checked)
}

// runsTarget says whether t.Component on t.Host runs t: nil when its
// mirror pod names the image (and emulation, when checked) and is ready,
// and an API server answers /version with the version and /readyz 200 at
// its own address; else what it lacks. The upgrade and the rollback wait
// on it.
func runsTarget(ctx context.Context, env Env, t target) error {
	run, err := env.Running(ctx)
	if err != nil {
		return err
	}
	pod, ok := run.Pods[t.Host+"/"+t.Component]
	switch {
	case !ok:
		return fmt.Errorf("host %s: no %s mirror pod", t.Host, t.Component)
	case pod.Image != t.Image:
		return fmt.Errorf("host %s: %s's mirror pod names %s, not yet %s", t.Host, t.Component, pod.Image, t.Image)
	case t.Emulated != nil && pod.Emulated != *t.Emulated:
		return fmt.Errorf("host %s: %s runs with --%s=%q, not yet %q", t.Host, t.Component, kubeversion.EmulatedVersionFlag, pod.Emulated, *t.Emulated)
	case !pod.Ready:
		return fmt.Errorf("host %s: %s runs %s but is not ready", t.Host, t.Component, pod.Image)
	}
	if t.Component != kubeversion.APIServer {
		return nil
	}
	a, ok := run.apiServer(t.Host)
	if !ok {
		return fmt.Errorf("host %s: kube-apiserver's address unknown", t.Host)
	}
	v, ready, err := env.APIServer(ctx, a)
	switch {
	case err != nil:
		return fmt.Errorf("host %s: kube-apiserver %s: %w", t.Host, a.URL, err)
	case v != t.Version:
		return fmt.Errorf("host %s: kube-apiserver %s answers /version %s, not yet %s", t.Host, a.URL, v, t.Version)
	case !ready:
		return fmt.Errorf("host %s: kube-apiserver %s/readyz is not 200", t.Host, a.URL)
	}
	return nil
}

func (r *Running) apiServer(host string) (APIServer, bool) {
	for _, a := range r.APIServers {
		if a.Host == host {
			return a, true
		}
	}
	return APIServer{}, false
}

// othersReady: every API server but host's answers /readyz: each host
// with an API server in the plan, and any other seen running. One whose
// mirror pod (so its address) is missing counts as not ready: it may be
// down, and two are never down at once.
func (e *Executor) othersReady(ctx context.Context, apiHosts []string, host string) error {
	run, err := e.Env.Running(ctx)
	if err != nil {
		return err
	}
	var bad []string
	seen := map[string]bool{}
	for _, a := range run.APIServers {
		seen[a.Host] = true
		if a.Host == host {
			continue
		}
		if _, ready, err := e.Env.APIServer(ctx, a); err != nil || !ready {
			why := "/readyz not 200"
			if err != nil {
				why = err.Error()
			}
			bad = append(bad, fmt.Sprintf("host %s: %s", a.Host, why))
		}
	}
	for _, h := range apiHosts {
		if h == host || seen[h] {
			continue
		}
		seen[h] = true
		bad = append(bad, fmt.Sprintf("host %s: no kube-apiserver mirror pod (it may be down)", h))
	}
	if len(bad) > 0 {
		return fmt.Errorf("another API server is not ready (%s): one is never stopped while another is down", strings.Join(bad, "; "))
	}
	return nil
}

// component upgrades comp on host: nothing when it runs the target;
// else (the other API servers ready first, for an API server) its
// manifest rewritten through the host's agent, then waited for.
func (e *Executor) component(ctx context.Context, id string, pl Payload, host, comp string) error {
	pc, ok := pl.component(host, comp)
	if !ok {
		return nil // already at the target when planned
	}
	if e.upgraded(ctx, pc) == nil {
		e.Progress.Say("host %s: %s already runs %s", host, comp, pc.ToVersion)
		return nil
	}
	if comp == kubeversion.APIServer {
		if err := e.wait(ctx, fmt.Sprintf("host %s: before kube-apiserver stops, the others ready", host), func() error {
			return e.othersReady(ctx, pl.apiHosts(), host)
		}); err != nil {
			return err
		}
	}
	cur, err := e.Env.Manifest(ctx, host, comp)
	if err != nil {
		return fmt.Errorf("host %s: read the %s manifest: %w", host, comp, err)
	}
	next, err := Rewrite(cur, pc)
	if err != nil {
		return fmt.Errorf("host %s: %w", host, err)
	}
	if string(next) != string(cur) {
		if err := e.Env.WriteManifest(ctx, host, comp, id, next); err != nil {
			return fmt.Errorf("host %s: write the %s manifest: %w", host, comp, err)
		}
		e.Progress.Say("host %s: %s manifest rewritten for %s", host, comp, pc.ToImage)
	}
	crashpoint.Hit(PointManifestWritten + ":" + host + "/" + comp)
	start := time.Now()
	if err := e.wait(ctx, fmt.Sprintf("host %s: %s running %s", host, comp, pc.ToVersion), func() error {
		return e.upgraded(ctx, pc)
	}); err != nil {
		return err
	}
	e.Progress.Say("host %s: %s runs %s, ready (%.1fs after its manifest)", host, comp, pc.ToVersion, time.Since(start).Seconds())
	return nil
}

// Rewrite returns a component's manifest moved to the planned image and
// flags: the container named after the component (else the first) gets
// the image, the flag changes of the dry run, and for an API server the
// drain flags it lacks (--shutdown-delay-duration, --shutdown-send-
// retry-after). A manifest already so is returned unchanged, byte for
// byte.
func Rewrite(manifest []byte, pc PlannedComponent) ([]byte, error) {
	if pc.ToImage == "" {
		return nil, fmt.Errorf("%s: no target image planned", pc.Component)
	}
	return editManifest(manifest, pc.Component, func(ctr *corev1.Container) {
		ctr.Image = pc.ToImage
		for _, fc := range pc.FlagChanges {
			containerFlag(ctr, fc.Flag, fc.To, fc.To == "")
		}
		if pc.Component == kubeversion.APIServer {
			flags := Flags(append(append([]string{}, ctr.Command...), ctr.Args...))
			if _, ok := flags["shutdown-delay-duration"]; !ok {
				containerFlag(ctr, "shutdown-delay-duration", ShutdownDelay, false)
			}
			if _, ok := flags["shutdown-send-retry-after"]; !ok {
				containerFlag(ctr, "shutdown-send-retry-after", "true", false)
			}
		}
	})
}

// WithoutFlag returns a component's manifest without --flag (in its
// command and its args); a manifest without it is returned unchanged,
// byte for byte.
func WithoutFlag(manifest []byte, component, flag string) ([]byte, error) {
	return editManifest(manifest, component, func(ctr *corev1.Container) {
		containerFlag(ctr, flag, "", true)
	})
}

// editManifest applies edit to the container named after the component
// (else the first) of a static pod manifest; a manifest edit leaves the
// same pod is returned as it was, byte for byte (a re-encoding alone
// must not restart a component).
func editManifest(manifest []byte, component string, edit func(*corev1.Container)) ([]byte, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(manifest, &pod); err != nil {
		// Fields this client-go does not know are kept by a
		// non-strict read and a re-encode would drop them: refuse.
		return nil, fmt.Errorf("%s manifest: %w", component, err)
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("%s manifest: no container", component)
	}
	ctr := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == component {
			ctr = &pod.Spec.Containers[i]
		}
	}
	edit(ctr)
	out, err := yaml.Marshal(&pod)
	if err != nil {
		return nil, err
	}
	var before corev1.Pod
	if err := yaml.Unmarshal(manifest, &before); err == nil {
		if b, err := yaml.Marshal(&before); err == nil && string(b) == string(out) {
			return manifest, nil
		}
	}
	return out, nil
}

// containerFlag sets (or removes) --name in a container where it is:
// in its command, its args, or both (observe reads flags from both); a
// flag in neither is appended to the command.
func containerFlag(ctr *corev1.Container, name, value string, remove bool) {
	inCmd, inArgs := hasFlag(ctr.Command, name), hasFlag(ctr.Args, name)
	if inCmd || remove || !inArgs {
		ctr.Command = setFlag(ctr.Command, name, value, remove)
	}
	if inArgs || remove && len(ctr.Args) > 0 {
		ctr.Args = setFlag(ctr.Args, name, value, remove)
	}
}

func hasFlag(cmd []string, name string) bool {
	for _, a := range cmd {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// setFlag sets --name=value in a command (replacing --name=... or
// --name VALUE), appending it when absent; remove drops it.
func setFlag(cmd []string, name, value string, remove bool) []string {
	out := make([]string, 0, len(cmd)+1)
	found := false
	for i := 0; i < len(cmd); i++ {
		a := cmd[i]
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			if a == "--"+name && i+1 < len(cmd) && !strings.HasPrefix(cmd[i+1], "-") {
				i++
			}
			if !remove && !found {
				out = append(out, "--"+name+"="+value)
			}
			found = true
			continue
		}
		out = append(out, a)
	}
	if !found && !remove {
		out = append(out, "--"+name+"="+value)
	}
	return out
}

// migrate rewrites the objects of every resource whose storage version
// hash changed since the plan was recorded.
func (e *Executor) migrate(ctx context.Context, pl Payload) error {
	now, err := e.Env.StorageHashes(ctx)
	if err != nil {
		return fmt.Errorf("discovery's storage versions: %w", err)
	}
	var changed []string
	for r, h := range now {
		if before, ok := pl.StorageHashes[r]; ok && before != h {
			changed = append(changed, r)
		}
	}
	slices.Sort(changed)
	if len(changed) == 0 {
		e.Progress.Say("no resource's storage version changed: nothing to migrate")
		return nil
	}
	e.Progress.Say("storage versions changed: %s: migrating", strings.Join(changed, ", "))
	return e.Env.MigrateStorage(ctx, changed)
}

// complete checks that every planned component runs the target, then
// has each host's agent drop the manifests kept for the plan.
func (e *Executor) complete(ctx context.Context, id string, pl Payload) error {
	var bad []error
	for _, pc := range pl.Components {
		if pc.Component == kubeversion.Kubelet {
			continue
		}
		check := e.upgraded
		if pl.EmulatedVersion != "" {
			check = e.switched
		}
		if err := check(ctx, pc); err != nil {
			bad = append(bad, err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("not every component runs %s: %w", pl.To, errors.Join(bad...))
	}
	var hosts []string
	for _, pc := range pl.Components {
		if !slices.Contains(hosts, pc.Host) && pc.Component != kubeversion.Kubelet {
			hosts = append(hosts, pc.Host)
		}
	}
	for _, h := range hosts {
		if err := e.Env.PruneKept(ctx, h, id); err != nil {
			return fmt.Errorf("host %s: remove the manifests kept for the plan: %w", h, err)
		}
	}
	return nil
}

// switched says whether comp runs the target without --emulated-version:
// nil when it does, else what it lacks.
func (e *Executor) switched(ctx context.Context, pc PlannedComponent) error {
	run, err := e.Env.Running(ctx)
	if err != nil {
		return err
	}
	if pod, ok := run.Pods[pc.Host+"/"+pc.Component]; ok && pod.Emulated != "" {
		return fmt.Errorf("host %s: %s still runs with --%s=%s", pc.Host, pc.Component, kubeversion.EmulatedVersionFlag, pod.Emulated)
	}
	return e.upgraded(ctx, pc)
}

// switchEmulation is the switching-emulated-version step, the plan's
// point of no return: --emulated-version removed from every planned
// component's manifest, each API server in host order (one at a time,
// the others ready before it stops, ready at its own address before the
// next), then each host's controller-manager and scheduler (never ahead
// of an API server in what they emulate). A manifest already without the
// flag is not written again, only waited for.
func (e *Executor) switchEmulation(ctx context.Context, id string, pl Payload) error {
	for _, comp := range []string{kubeversion.APIServer, kubeversion.ControllerManager, kubeversion.Scheduler} {
		for _, pc := range pl.Components {
			if pc.Component != comp {
				continue
			}
			if err := e.switchOne(ctx, id, pl, pc); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Executor) switchOne(ctx context.Context, id string, pl Payload, pc PlannedComponent) error {
	host, comp := pc.Host, pc.Component
	cur, err := e.Env.Manifest(ctx, host, comp)
	if err != nil {
		return fmt.Errorf("host %s: read the %s manifest: %w", host, comp, err)
	}
	next, err := WithoutFlag(cur, comp, kubeversion.EmulatedVersionFlag)
	if err != nil {
		return fmt.Errorf("host %s: %w", host, err)
	}
	if string(next) == string(cur) && e.switched(ctx, pc) == nil {
		e.Progress.Say("host %s: %s already runs %s without --%s", host, comp, pc.ToVersion, kubeversion.EmulatedVersionFlag)
		return nil
	}
	if string(next) != string(cur) {
		if comp == kubeversion.APIServer {
			if err := e.wait(ctx, fmt.Sprintf("host %s: before kube-apiserver stops, the others ready", host), func() error {
				return e.othersReady(ctx, pl.apiHosts(), host)
			}); err != nil {
				return err
			}
		}
		if err := e.Env.WriteManifest(ctx, host, comp, id, next); err != nil {
			return fmt.Errorf("host %s: write the %s manifest: %w", host, comp, err)
		}
		e.Progress.Say("host %s: %s manifest without --%s=%s", host, comp, kubeversion.EmulatedVersionFlag, pl.EmulatedVersion)
	}
	crashpoint.Hit(PointEmulationSwitched + ":" + host + "/" + comp)
	start := time.Now()
	if err := e.wait(ctx, fmt.Sprintf("host %s: %s running %s without --%s", host, comp, pc.ToVersion, kubeversion.EmulatedVersionFlag), func() error {
		return e.switched(ctx, pc)
	}); err != nil {
		return err
	}
	e.Progress.Say("host %s: %s runs %s with its APIs and features, ready (%.1fs after its manifest)", host, comp, pc.ToVersion, time.Since(start).Seconds())
	return nil
}
