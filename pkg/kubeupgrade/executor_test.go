package kubeupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

// fakeKube is an in-memory control plane of three hosts: a manifest per
// host and component, and kubelets that run what a manifest names after
// `lag` looks at it (an API server is down meanwhile). It records the
// writes and checks that two API servers are never down at once.
type fakeKube struct {
	t   *testing.T
	mu  sync.Mutex // owns every field below
	man map[string][]byte
	// running is the image each HOST/COMPONENT runs, emu its
	// --emulated-version; lag counts the looks left before a rewritten
	// manifest runs.
	running map[string]string
	emu     map[string]string
	lag     map[string]int
	// writes are the manifests written: HOST/COMPONENT, with "~emulation"
	// when only the emulated version changed, "~restore" when the kept
	// manifest came back, "~unchanged" when the write held what the
	// manifest held (the agent changes nothing; the executors never ask).
	writes []string
	pruned []string
	// kept are the manifests kept before each plan's first write of
	// them, by plan and HOST/COMPONENT.
	kept map[string]map[string][]byte
	// etcdBad makes EtcdHealth fail with it.
	etcdBad string
	// failWrite fails the next write of that HOST/COMPONENT once.
	failWrite string
	// notReady keeps that host's API server unready.
	notReady string
	// noMirror hides that host's kube-apiserver mirror pod (and so its
	// address) from Running.
	noMirror string
	// stuck is a HOST/COMPONENT whose kubelet never runs a rewritten
	// manifest.
	stuck    string
	hashes   map[string]string
	migrated []string
	maxDown  int
}

var hosts = []string{"node-a", "node-b", "node-c"}

func newFakeKube(t *testing.T) *fakeKube {
	f := &fakeKube{t: t, man: map[string][]byte{}, running: map[string]string{}, emu: map[string]string{}, lag: map[string]int{}, kept: map[string]map[string][]byte{},
		hashes: map[string]string{"configmaps": "h1", "deployments.apps": "h2"}}
	for _, h := range hosts {
		for _, c := range kubeversion.ControlPlane {
			img := "registry.k8s.io/" + c + ":v1.35.4"
			pod := corev1.Pod{TypeMeta: metavPod(), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: c, Image: img, Command: []string{c, "--secure-port=6443"}}}}}
			pod.Name, pod.Namespace = c, "kube-system"
			b, err := yaml.Marshal(&pod)
			if err != nil {
				t.Fatal(err)
			}
			f.man[h+"/"+c] = b
			f.running[h+"/"+c] = img
		}
	}
	return f
}

func metavPod() metav1.TypeMeta { return metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"} }

func imageOf(t *testing.T, b []byte) string {
	img, _ := runsOf(t, b)
	return img
}

// runsOf is what a manifest runs: its image and --emulated-version.
func runsOf(t *testing.T, b []byte) (image, emulated string) {
	var p corev1.Pod
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	return c.Image, Flags(append(append([]string{}, c.Command...), c.Args...))[kubeversion.EmulatedVersionFlag]
}

// step moves the kubelets on: a rewritten manifest runs once its lag is
// spent. The caller holds mu.
func (f *fakeKube) step() {
	down := 0
	for k, b := range f.man {
		img, emu := runsOf(f.t, b)
		if f.running[k] == img && f.emu[k] == emu {
			continue
		}
		if k == f.stuck {
			continue
		}
		if f.lag[k] > 0 {
			f.lag[k]--
			if strings.HasSuffix(k, "/"+kubeversion.APIServer) {
				down++
			}
			continue
		}
		f.running[k], f.emu[k] = img, emu
	}
	f.maxDown = max(f.maxDown, down)
}

func (f *fakeKube) Running(context.Context) (*Running, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.step()
	r := &Running{Pods: map[string]PodState{}}
	for _, h := range hosts {
		if h != f.noMirror {
			r.APIServers = append(r.APIServers, APIServer{Host: h, URL: "https://" + h + ":6443"})
		}
		for _, c := range kubeversion.ControlPlane {
			k := h + "/" + c
			if h == f.noMirror && c == kubeversion.APIServer {
				continue
			}
			ready := f.lag[k] == 0 && !(c == kubeversion.APIServer && f.notReady == h)
			r.Pods[k] = PodState{Image: f.running[k], Emulated: f.emu[k], Ready: ready}
		}
	}
	return r, nil
}

func (f *fakeKube) APIServer(_ context.Context, a APIServer) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := a.Host + "/" + kubeversion.APIServer
	if f.lag[k] > 0 {
		return "", false, errors.New("connection refused")
	}
	return ImageTag(f.running[k]), f.notReady != a.Host, nil
}

func (f *fakeKube) Manifest(_ context.Context, host, comp string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.man[host+"/"+comp], nil
}

func (f *fakeKube) WriteManifest(_ context.Context, host, comp, id string, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := host + "/" + comp
	if f.failWrite == k {
		f.failWrite = ""
		return errors.New("agent unreachable")
	}
	cur := f.man[k]
	if string(cur) == string(b) {
		f.writes = append(f.writes, k+"~unchanged") // the agent changes nothing
		return nil
	}
	what := k
	oldImg, _ := runsOf(f.t, cur)
	newImg, _ := runsOf(f.t, b)
	switch kept, ok := f.kept[id][k]; {
	case ok && string(kept) == string(b):
		what += "~restore"
	case oldImg == newImg:
		what += "~emulation"
	}
	if f.kept[id] == nil {
		f.kept[id] = map[string][]byte{}
	}
	if _, ok := f.kept[id][k]; !ok {
		f.kept[id][k] = cur
	}
	f.writes = append(f.writes, what)
	f.man[k] = b
	f.lag[k] = 2
	return nil
}

func (f *fakeKube) PruneKept(_ context.Context, host, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned = append(f.pruned, host)
	for k := range f.kept[id] {
		if strings.HasPrefix(k, host+"/") {
			delete(f.kept[id], k)
		}
	}
	return nil
}

func (f *fakeKube) Kept(_ context.Context, host, comp, id string) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.kept[id][host+"/"+comp]
	return b, ok, nil
}

func (f *fakeKube) EtcdHealth(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.etcdBad != "" {
		return errors.New(f.etcdBad)
	}
	return nil
}

func (f *fakeKube) UpgradeEtcd(context.Context, string, string) error {
	return errors.New("no etcd step planned")
}

func (f *fakeKube) StorageHashes(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return map[string]string{"configmaps": "h1", "deployments.apps": "h2-new", "widgets.example.com": "x"}, nil
}

func (f *fakeKube) MigrateStorage(_ context.Context, rs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.migrated = append(f.migrated, rs...)
	return nil
}

func newKubePlan(t *testing.T, f *fakeKube) (*plan.Store, *plan.Plan) {
	t.Helper()
	p, err := NewPlan(dryRun(t, "v1.35.4"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := plan.PayloadOf[Payload](p)
	pl.StorageHashes = f.hashes
	if err := plan.SetPayload(p, pl); err != nil {
		t.Fatal(err)
	}
	st := plan.OpenStore(t.TempDir())
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return st, p
}

// TestExecutorUpgrades: the whole plan against the in-memory control
// plane: API servers one host at a time (never two down), then each
// host's controller-manager and scheduler; every manifest names the
// target image and an API server's the drain flags; only the resources
// whose storage version hash changed are migrated; the kept manifests
// are pruned on every host once all runs the target.
func TestExecutorUpgrades(t *testing.T) {
	f := newFakeKube(t)
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	want := "node-a/kube-apiserver,node-b/kube-apiserver,node-c/kube-apiserver," +
		"node-a/kube-controller-manager,node-a/kube-scheduler,node-b/kube-controller-manager,node-b/kube-scheduler,node-c/kube-controller-manager,node-c/kube-scheduler," +
		// switching-emulated-version: the API servers first, then the
		// controller-managers and the schedulers.
		"node-a/kube-apiserver~emulation,node-b/kube-apiserver~emulation,node-c/kube-apiserver~emulation," +
		"node-a/kube-controller-manager~emulation,node-b/kube-controller-manager~emulation,node-c/kube-controller-manager~emulation," +
		"node-a/kube-scheduler~emulation,node-b/kube-scheduler~emulation,node-c/kube-scheduler~emulation"
	if got := strings.Join(f.writes, ","); got != want {
		t.Errorf("writes %s\nwant   %s", got, want)
	}
	for k, b := range f.man {
		if _, emu := runsOf(t, b); emu != "" || strings.Contains(string(b), "emulated-version") {
			t.Errorf("%s: --emulated-version left after the plan:\n%s", k, b)
		}
	}
	if f.maxDown > 1 {
		t.Errorf("%d API servers down at once", f.maxDown)
	}
	for k, b := range f.man {
		if img := imageOf(t, b); !strings.HasSuffix(img, ":v1.36.3") {
			t.Errorf("%s: %s", k, img)
		}
		drain := strings.Contains(string(b), "--shutdown-delay-duration="+ShutdownDelay) && strings.Contains(string(b), "--shutdown-send-retry-after=true")
		if drain != strings.HasSuffix(k, "/kube-apiserver") {
			t.Errorf("%s: drain flags %v", k, drain)
		}
	}
	if !slices.Equal(f.migrated, []string{"deployments.apps"}) {
		t.Errorf("migrated %v, want only the resource whose hash changed", f.migrated)
	}
	slices.Sort(f.pruned)
	if !slices.Equal(f.pruned, hosts) {
		t.Errorf("pruned %v", f.pruned)
	}
	p, _ = st.Get(p.ID)
	if p.State != plan.Done || State(p) != kubeversion.StepComplete {
		t.Errorf("plan %s, %s", p.State, State(p))
	}
	// Run again: already done, nothing written.
	n := len(f.writes)
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil || len(f.writes) != n {
		t.Errorf("a done plan again: %v, %d writes", err, len(f.writes)-n)
	}
}

// TestExecutorResumesWhereHostsAre: a step that failed half-way (the
// second host's agent unreachable) leaves the plan failed there, the first
// host upgraded; resumed, it goes on from the second host, never
// rewriting the first. A step interrupted after its manifest was written
// (its manifest already names the target) writes nothing again and only
// waits for it.
func TestExecutorResumesWhereHostsAre(t *testing.T) {
	f := newFakeKube(t)
	f.failWrite = "node-b/kube-apiserver"
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	err := plan.Run(t.Context(), st, p.ID, ex, nil)
	var se *plan.StepError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "agent unreachable") {
		t.Fatalf("run: %v", err)
	}
	p, _ = st.Get(p.ID)
	if s := State(p); s != "upgrading-second-control-plane-failed" {
		t.Errorf("state %s", s)
	}
	cs, _ := Components(p)
	for _, c := range cs {
		if c.Host == "node-a" && c.Component == kubeversion.APIServer && c.State != ComponentUpgraded ||
			c.Host == "node-b" && c.Component == kubeversion.APIServer && c.State != "upgrading-failed" {
			t.Errorf("%s %s: %s", c.Host, c.Component, c.State)
		}
	}
	// The manifest of node-c written by hand (as if a killed step had
	// written it): the resume waits for it without writing it again.
	b, _ := f.Manifest(t.Context(), "node-c", kubeversion.APIServer)
	pc, _ := (&Payload{Components: mustPayload(t, p).Components}).component("node-c", kubeversion.APIServer)
	nb, err := Rewrite(b, pc)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.man["node-c/kube-apiserver"], f.lag["node-c/kube-apiserver"] = nb, 1
	f.mu.Unlock()
	if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, w := range f.writes {
		count[w]++
	}
	if count["node-a/kube-apiserver"] != 1 || count["node-b/kube-apiserver"] != 1 || count["node-c/kube-apiserver"] != 0 {
		t.Errorf("writes %v", f.writes)
	}
}

func mustPayload(t *testing.T, p *plan.Plan) Payload {
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// TestExecutorWaitsForOtherAPIServers: an API server is never stopped
// while another is not ready: the step fails naming it, no manifest
// written.
func TestExecutorWaitsForOtherAPIServers(t *testing.T) {
	f := newFakeKube(t)
	f.notReady = "node-c"
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 50 * time.Millisecond}
	err := plan.Run(t.Context(), st, p.ID, ex, nil)
	if err == nil || !strings.Contains(err.Error(), "host node-c") || !strings.Contains(err.Error(), "never stopped while another is down") {
		t.Fatalf("run: %v", err)
	}
	if len(f.writes) != 0 {
		t.Errorf("writes %v", f.writes)
	}
}

// TestExecutorMissingMirrorPodNotReady: a planned API server whose
// mirror pod is missing counts as not ready: no other is stopped.
func TestExecutorMissingMirrorPodNotReady(t *testing.T) {
	f := newFakeKube(t)
	f.noMirror = "node-c"
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 50 * time.Millisecond}
	err := plan.Run(t.Context(), st, p.ID, ex, nil)
	if err == nil || !strings.Contains(err.Error(), "host node-c: no kube-apiserver mirror pod") || !strings.Contains(err.Error(), "never stopped while another is down") {
		t.Fatalf("run: %v", err)
	}
	if len(f.writes) != 0 {
		t.Errorf("writes %v", f.writes)
	}
}

// TestRewriteArgs: a flag in the container's args is changed there (the
// observer reads command and args), not added again to the command; a
// drain flag already in the args is not added again.
func TestRewriteArgs(t *testing.T) {
	pod := corev1.Pod{TypeMeta: metavPod(), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: kubeversion.APIServer,
		Image: "registry.k8s.io/kube-apiserver:v1.35.4", Command: []string{"kube-apiserver"},
		Args: []string{"--secure-port=6443", "--old-flag=y", "--shutdown-delay-duration=9s"}}}}}
	pod.Name, pod.Namespace = kubeversion.APIServer, "kube-system"
	in, err := yaml.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	pc := PlannedComponent{Host: "node-a", Component: kubeversion.APIServer, ToVersion: "v1.36.3", ToImage: "registry.k8s.io/kube-apiserver:v1.36.3",
		FlagChanges: []kubeversion.FlagChange{{Component: kubeversion.APIServer, Flag: "secure-port", From: "6443", To: "6444"}, {Component: kubeversion.APIServer, Flag: "old-flag", From: "y"}}}
	out, err := Rewrite(in, pc)
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	ctr := got.Spec.Containers[0]
	all := append(append([]string{}, ctr.Command...), ctr.Args...)
	if f := Flags(all); f["secure-port"] != "6444" || f["shutdown-delay-duration"] != "9s" || f["shutdown-send-retry-after"] != "true" {
		t.Errorf("flags %v", f)
	}
	if _, ok := Flags(all)["old-flag"]; ok {
		t.Errorf("old-flag kept: %v", all)
	}
	if slices.Contains(ctr.Command, "--secure-port=6444") || !slices.Contains(ctr.Args, "--secure-port=6444") || strings.Contains(strings.Join(all, " "), "6443") {
		t.Errorf("command %v args %v", ctr.Command, ctr.Args)
	}
}

// TestKeptUntilSuccess: a component that never runs the target fails
// its step and the plan, and nothing kept is pruned; the complete step,
// reached with that component still not at the target, fails too and
// prunes nothing: the kept manifests are removed only after success.
func TestKeptUntilSuccess(t *testing.T) {
	f := newFakeKube(t)
	f.stuck = "node-b/kube-scheduler"
	st, p := newKubePlan(t, f)
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: time.Second}
	err := plan.Run(t.Context(), st, p.ID, ex, nil)
	if err == nil || !strings.Contains(err.Error(), "host node-b: kube-scheduler") {
		t.Fatalf("run: %v", err)
	}
	got, err := st.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != plan.Failed || len(f.pruned) != 0 {
		t.Fatalf("plan %s, pruned %v", got.State, f.pruned)
	}
	// Past the failed step (as if it had been skipped), the complete
	// step still finds the scheduler not at the target.
	last := len(got.Steps) - 1
	if got.Steps[last].Kind != kubeversion.StepComplete {
		t.Fatalf("last step %s", got.Steps[last].Kind)
	}
	for i := range got.Steps[:last] {
		got.Steps[i].State = plan.Done
	}
	got.Steps[last].State, got.State, got.Error = plan.Pending, plan.Running, ""
	if err := st.Save(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	err = plan.Run(t.Context(), st, p.ID, ex, nil)
	if err == nil || !strings.Contains(err.Error(), "not every component runs") || !strings.Contains(err.Error(), "host node-b: kube-scheduler") {
		t.Fatalf("complete: %v", err)
	}
	if got, _ := st.Get(p.ID); got.State != plan.Failed || len(f.pruned) != 0 {
		t.Errorf("plan %s, pruned %v", got.State, f.pruned)
	}
}

// TestRewrite: the image and flag changes set, the drain flags added to
// an API server's once, a manifest already rewritten returned byte for
// byte; a manifest with a field the pod type does not know is refused.
func TestRewrite(t *testing.T) {
	f := newFakeKube(t)
	in := f.man["node-a/kube-apiserver"]
	pc := PlannedComponent{Host: "node-a", Component: kubeversion.APIServer, ToVersion: "v1.36.3", ToImage: "registry.k8s.io/kube-apiserver:v1.36.3",
		FlagChanges: []kubeversion.FlagChange{{Component: kubeversion.APIServer, Flag: "secure-port", From: "6443", To: "6444"}, {Component: kubeversion.APIServer, Flag: "new-flag", To: "x"}}}
	out, err := Rewrite(in, pc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: registry.k8s.io/kube-apiserver:v1.36.3", "--secure-port=6444", "--new-flag=x", "--shutdown-delay-duration=5s", "--shutdown-send-retry-after=true"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "6443") {
		t.Errorf("old flag kept:\n%s", out)
	}
	again, err := Rewrite(out, pc)
	if err != nil || string(again) != string(out) {
		t.Errorf("a rewritten manifest changed again: %v\n%s", err, again)
	}
	if _, err := Rewrite([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containerz: []\n"), pc); err == nil {
		t.Error("an unknown field accepted")
	}
	if got := fmt.Sprint(setFlag([]string{"a", "--x", "1", "--y=2"}, "x", "3", false)); got != "[a --x=3 --y=2]" {
		t.Errorf("setFlag %s", got)
	}
}

// TestKillAtEveryStep: the plan as a kill leaves it on disk at each of
// the engine's crash points (plan-step-before:N: steps before N done, N
// recorded running, its action not run; plan-step-after:N: the same with
// N's action run), then resumed with plan.Run: it completes, every
// manifest is written once (a step whose action ran writes nothing
// again), and two API servers are never down at once.
func TestKillAtEveryStep(t *testing.T) {
	steps := len(newPlanSteps(t))
	for n := range steps {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("plan-step-before:%d", n)
			if after {
				name = fmt.Sprintf("plan-step-after:%d", n)
			}
			t.Run(name, func(t *testing.T) {
				f := newFakeKube(t)
				st, p := newKubePlan(t, f)
				ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
				last := n - 1
				if after {
					last = n
				}
				for i := 0; i <= last; i++ {
					if err := ex.Execute(t.Context(), p, &p.Steps[i]); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				for i := range n {
					p.Steps[i].State = plan.Done
				}
				p.Steps[n].State, p.State = plan.Running, plan.Running
				if err := st.Save(t.Context(), p); err != nil {
					t.Fatal(err)
				}
				if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
					t.Fatalf("resume: %v", err)
				}
				got, _ := st.Get(p.ID)
				if got.State != plan.Done {
					t.Errorf("plan %s", got.State)
				}
				count := map[string]int{}
				for _, w := range f.writes {
					count[w]++
				}
				// Each of the 9 components once to the target image
				// (with --emulated-version), once without the flag.
				if len(count) != 18 {
					t.Errorf("%d writes, want 18: %v", len(count), f.writes)
				}
				for k, c := range count {
					if c != 1 {
						t.Errorf("%s written %d times", k, c)
					}
				}
				if f.maxDown > 1 {
					t.Errorf("%d API servers down at once", f.maxDown)
				}
			})
		}
	}
}

// TestKillAfterManifestWritten: the plan as a kill at
// kube-manifest-written:HOST/COMPONENT leaves it, for each step that
// writes a manifest: the step running, its first component's manifest
// rewritten, the component not yet running it. Resumed, the step writes
// that manifest no second time (its kubelet restarts it once) and waits
// for it; the plan completes.
func TestKillAfterManifestWritten(t *testing.T) {
	for n, s := range newPlanSteps(t) {
		comp := kubeversion.APIServer
		switch {
		case s.Kind == kubeversion.StepControllers:
			comp = kubeversion.ControllerManager
		case !isControlPlaneStep(s.Kind):
			continue
		}
		point := PointManifestWritten + ":" + s.Member + "/" + comp
		t.Run(point, func(t *testing.T) {
			f := newFakeKube(t)
			st, p := newKubePlan(t, f)
			ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
			for i := range n {
				if err := ex.Execute(t.Context(), p, &p.Steps[i]); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				p.Steps[i].State = plan.Done
			}
			pc, _ := (&Payload{Components: mustPayload(t, p).Components}).component(s.Member, comp)
			k := s.Member + "/" + comp
			nb, err := Rewrite(f.man[k], pc)
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			f.man[k], f.lag[k] = nb, 3
			f.mu.Unlock()
			p.Steps[n].State, p.State = plan.Running, plan.Running
			if err := st.Save(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if slices.Contains(f.writes, k) {
				t.Errorf("%s written again on resume: %v", k, f.writes)
			}
			if got, _ := st.Get(p.ID); got.State != plan.Done {
				t.Errorf("plan %s", got.State)
			}
		})
	}
}

func newPlanSteps(t *testing.T) []plan.Step {
	p, err := NewPlan(dryRun(t, "v1.35.4"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p.Steps
}
