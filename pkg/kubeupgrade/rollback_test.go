package kubeupgrade

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
)

// upgradeUntil runs the upgrade plan's steps before step kind stop (the
// first of that kind) as a killed apply leaves them: each done and saved,
// the plan then running at stop, which has not started.
func upgradeUntil(t *testing.T, f *fakeKube, st *plan.Store, p *plan.Plan, stop string) *plan.Plan {
	t.Helper()
	ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
	for i := range p.Steps {
		if p.Steps[i].Kind == stop {
			break
		}
		if err := ex.Execute(t.Context(), p, &p.Steps[i]); err != nil {
			t.Fatalf("upgrade step %d: %v", i, err)
		}
		p.Steps[i].State = plan.Done
	}
	p.State = plan.Running
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// originals are the manifests of a fresh fakeKube, by HOST/COMPONENT.
func originals(t *testing.T) map[string][]byte {
	return newFakeKube(t).man
}

func rollbackExecutor(f *fakeKube, timeout time.Duration) *RollbackExecutor {
	return &RollbackExecutor{Executor: Executor{Env: f, Poll: time.Millisecond, Timeout: timeout}}
}

func stepsOf(p *plan.Plan) string {
	var out []string
	for _, s := range p.Steps {
		if s.Member != "" {
			out = append(out, s.Kind+"("+s.Member+")")
		} else {
			out = append(out, s.Kind)
		}
	}
	return strings.Join(out, ",")
}

// TestRollbackAfterControllers: an upgrade stopped after every component
// runs the target (still emulating 1.35, before the point of no return)
// is rolled back in the order going down needs: the controller-managers
// and schedulers first, then the API servers one at a time (never two
// down), each given back its kept manifest byte for byte; the kept
// copies are pruned at the end and the upgrade plan is marked rolled
// back, the rollback staying the latest plan.
func TestRollbackAfterControllers(t *testing.T) {
	f := newFakeKube(t)
	orig := originals(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
	for k, b := range f.man {
		if _, emu := runsOf(t, b); emu != "1.35" {
			t.Fatalf("%s runs the target without --emulated-version=1.35 before the switch: %q", k, emu)
		}
	}
	if _, err := RollbackOf(up); err != nil {
		t.Fatalf("RollbackOf: %v", err)
	}
	rb, err := NewRollback(t.Context(), f, up, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := "rollback-started,rolling-back-controllers(node-c),rolling-back-controllers(node-b),rolling-back-controllers(node-a)," +
		"rolling-back-first-control-plane(node-c),rolling-back-second-control-plane(node-b),rolling-back-third-control-plane(node-a),rollback-complete"
	if got := stepsOf(rb); got != want {
		t.Errorf("steps %s\nwant  %s", got, want)
	}
	if rb.Of != up.ID || rb.Kind != KindKubeRollback {
		t.Errorf("rollback %s of %s", rb.Kind, rb.Of)
	}
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.writes, f.maxDown = nil, 0
	f.mu.Unlock()
	if err := plan.Run(t.Context(), st, rb.ID, rollbackExecutor(f, 5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if err := markRolledBack(t.Context(), st, rb.ID); err != nil {
		t.Fatal(err)
	}
	wantWrites := "node-c/kube-scheduler~restore,node-c/kube-controller-manager~restore,node-b/kube-scheduler~restore,node-b/kube-controller-manager~restore," +
		"node-a/kube-scheduler~restore,node-a/kube-controller-manager~restore,node-c/kube-apiserver~restore,node-b/kube-apiserver~restore,node-a/kube-apiserver~restore"
	if got := strings.Join(f.writes, ","); got != wantWrites {
		t.Errorf("writes %s\nwant   %s", got, wantWrites)
	}
	if f.maxDown > 1 {
		t.Errorf("%d API servers down at once", f.maxDown)
	}
	for k, b := range f.man {
		if string(b) != string(orig[k]) {
			t.Errorf("%s: not the kept manifest:\n%s", k, b)
		}
		if f.running[k] != "registry.k8s.io/"+strings.SplitN(k, "/", 2)[1]+":v1.35.4" || f.emu[k] != "" {
			t.Errorf("%s runs %s (emulating %q)", k, f.running[k], f.emu[k])
		}
	}
	if len(f.kept[up.ID]) != 0 {
		t.Errorf("kept copies left: %d", len(f.kept[up.ID]))
	}
	gotUp, _ := st.Get(up.ID)
	if gotUp.State != plan.RolledBack || State(gotUp) != StateRolledBack {
		t.Errorf("upgrade plan %s, %s", gotUp.State, State(gotUp))
	}
	if latest, _ := st.Latest(); latest.ID != rb.ID || RollbackState(latest) != StepRollbackComplete {
		t.Errorf("latest %s %s", latest.ID, RollbackState(latest))
	}
	cs, _ := RestoredStates(mustGet(t, st, rb.ID))
	if len(cs) != 9 {
		t.Errorf("%d restored components, want 9", len(cs))
	}
	for _, c := range cs {
		if c.State != ComponentRolledBack || c.ToVersion != "v1.35.4" {
			t.Errorf("%s %s: %s to %s", c.Host, c.Component, c.State, c.ToVersion)
		}
	}
	// Rolled back already: nothing more to roll back.
	if _, err := rollbackSubject(st); !errors.Is(err, ErrNoUpgradeToRollBack) {
		t.Errorf("a second rollback: %v", err)
	}
}

// TestRollbackAfterAbortedRollback: a rollback aborted half-way leaves
// its upgrade to be rolled back again by a new rollback, which writes
// back only what is not back yet.
func TestRollbackAfterAbortedRollback(t *testing.T) {
	f := newFakeKube(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
	up.State = plan.Aborted
	if err := st.Save(t.Context(), up); err != nil {
		t.Fatal(err)
	}
	rb, err := NewRollback(t.Context(), f, up, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.writes = nil
	f.mu.Unlock()
	ex := rollbackExecutor(f, 5*time.Second)
	for i := range 3 { // started and two hosts' controllers
		if err := ex.Execute(t.Context(), rb, &rb.Steps[i]); err != nil {
			t.Fatal(err)
		}
		rb.Steps[i].State = plan.Done
	}
	rb.State = plan.Aborted
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	again, err := rollbackSubject(st)
	if err != nil || again.ID != up.ID {
		t.Fatalf("after an aborted rollback: %v, %v", again, err)
	}
	rb2, err := NewRollback(t.Context(), f, again, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(t.Context(), rb2); err != nil {
		t.Fatal(err)
	}
	if err := plan.Run(t.Context(), st, rb2.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, w := range f.writes {
		count[w]++
	}
	if len(count) != 9 {
		t.Errorf("%d components written back, want 9: %v", len(count), f.writes)
	}
	for k, n := range count {
		if n != 1 {
			t.Errorf("%s written back %d times", k, n)
		}
	}
}

func mustGet(t *testing.T, st *plan.Store, id string) *plan.Plan {
	t.Helper()
	p, err := st.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRollbackAfterKill: apply killed right after it wrote the second
// API server's manifest (its kubelet not yet running it, so it is down):
// the rollback restores that one first, then the first; the third, which
// the upgrade never touched, and every controller are left alone.
func TestRollbackAfterKill(t *testing.T) {
	f := newFakeKube(t)
	orig := originals(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.ControlPlaneState(1))
	// The killed step: node-b's manifest written, not yet running.
	pc, _ := (&Payload{Components: mustPayload(t, up).Components}).component("node-b", kubeversion.APIServer)
	nb, err := Rewrite(f.man["node-b/kube-apiserver"], pc)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteManifest(t.Context(), "node-b", kubeversion.APIServer, up.ID, nb); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.lag["node-b/kube-apiserver"] = 1000 // down until rolled back
	f.writes = nil
	f.mu.Unlock()
	up.Steps[2].State = plan.Running
	if err := st.Save(t.Context(), up); err != nil {
		t.Fatal(err)
	}

	rb, err := NewRollback(t.Context(), f, up, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := "rollback-started,rolling-back-first-control-plane(node-b),rolling-back-second-control-plane(node-a),rollback-complete"; stepsOf(rb) != want {
		t.Errorf("steps %s\nwant  %s", stepsOf(rb), want)
	}
	pl, _ := plan.PayloadOf[RollbackPayload](rb)
	slices.Sort(pl.Untouched)
	if want := "node-a kube-controller-manager,node-a kube-scheduler,node-b kube-controller-manager,node-b kube-scheduler,node-c kube-apiserver,node-c kube-controller-manager,node-c kube-scheduler"; strings.Join(pl.Untouched, ",") != want {
		t.Errorf("untouched %v", pl.Untouched)
	}
	f.mu.Lock()
	f.lag["node-b/kube-apiserver"] = 0 // its kubelet reacts again
	f.mu.Unlock()
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	if err := plan.Run(t.Context(), st, rb.ID, rollbackExecutor(f, 5*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if want := "node-b/kube-apiserver~restore,node-a/kube-apiserver~restore"; strings.Join(f.writes, ",") != want {
		t.Errorf("writes %v, want %s", f.writes, want)
	}
	if f.maxDown > 1 {
		t.Errorf("%d API servers down at once", f.maxDown)
	}
	for k, b := range f.man {
		if string(b) != string(orig[k]) {
			t.Errorf("%s: not as before the upgrade", k)
		}
	}
}

// TestRollbackResumes: a rollback whose step failed half-way (node-a's
// agent unreachable when its API server goes back) is resumed from where
// the hosts are: what is back already is not written again; killed at
// each of the engine's crash points it completes too, every component
// written back once.
func TestRollbackResumes(t *testing.T) {
	f := newFakeKube(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
	rb, err := NewRollback(t.Context(), f, up, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.writes = nil
	f.failWrite = "node-a/kube-apiserver"
	f.mu.Unlock()
	ex := rollbackExecutor(f, 5*time.Second)
	err = plan.Run(t.Context(), st, rb.ID, ex, nil)
	if err == nil || !strings.Contains(err.Error(), "agent unreachable") {
		t.Fatalf("run: %v", err)
	}
	got := mustGet(t, st, rb.ID)
	if s := RollbackState(got); s != "rolling-back-third-control-plane-failed" {
		t.Errorf("state %s", s)
	}
	if err := plan.Run(t.Context(), st, rb.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, w := range f.writes {
		count[w]++
	}
	if len(count) != 9 {
		t.Errorf("%d components written back, want 9: %v", len(count), f.writes)
	}
	for k, n := range count {
		if n != 1 {
			t.Errorf("%s written back %d times", k, n)
		}
	}

	for n := range len(rb.Steps) {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("plan-step-before:%d", n)
			if after {
				name = fmt.Sprintf("plan-step-after:%d", n)
			}
			t.Run(name, func(t *testing.T) {
				f := newFakeKube(t)
				st, up := newKubePlan(t, f)
				up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
				rb, err := NewRollback(t.Context(), f, up, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				f.mu.Lock()
				f.writes, f.maxDown = nil, 0
				f.mu.Unlock()
				ex := rollbackExecutor(f, 5*time.Second)
				last := n - 1
				if after {
					last = n
				}
				for i := 0; i <= last; i++ {
					if err := ex.Execute(t.Context(), rb, &rb.Steps[i]); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				for i := range n {
					rb.Steps[i].State = plan.Done
				}
				rb.Steps[n].State, rb.State = plan.Running, plan.Running
				if err := st.Save(t.Context(), rb); err != nil {
					t.Fatal(err)
				}
				if err := plan.Run(t.Context(), st, rb.ID, ex, nil); err != nil {
					t.Fatalf("resume: %v", err)
				}
				count := map[string]int{}
				for _, w := range f.writes {
					count[w]++
				}
				if len(count) != 9 {
					t.Errorf("%d components written back, want 9: %v", len(count), f.writes)
				}
				for k, c := range count {
					if c != 1 {
						t.Errorf("%s written back %d times", k, c)
					}
				}
				if f.maxDown > 1 {
					t.Errorf("%d API servers down at once", f.maxDown)
				}
			})
		}
	}
}

// TestRollbackWaitsForOtherAPIServers: an API server is not given back
// its old manifest while another is not ready: the step fails naming
// it, nothing of it written.
func TestRollbackWaitsForOtherAPIServers(t *testing.T) {
	f := newFakeKube(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
	rb, err := NewRollback(t.Context(), f, up, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.writes = nil
	f.mu.Unlock()
	ex := rollbackExecutor(f, 5*time.Second)
	// The controllers back, then node-a's API server made unready.
	for i := range rb.Steps {
		if isRollbackControlPlaneStep(rb.Steps[i].Kind) {
			break
		}
		if err := ex.Execute(t.Context(), rb, &rb.Steps[i]); err != nil {
			t.Fatal(err)
		}
		rb.Steps[i].State = plan.Done
	}
	if err := st.Save(t.Context(), rb); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.notReady = "node-a"
	n := len(f.writes)
	f.mu.Unlock()
	err = plan.Run(t.Context(), st, rb.ID, rollbackExecutor(f, 50*time.Millisecond), nil)
	if err == nil || !strings.Contains(err.Error(), "host node-a") || !strings.Contains(err.Error(), "never stopped while another is down") {
		t.Fatalf("run: %v", err)
	}
	if len(f.writes) != n {
		t.Errorf("written while another API server was down: %v", f.writes[n:])
	}
}

// TestRollbackRefusals: each refusal one message of its kind, nothing
// changed: no plan, a plan of another kind open or last, an open
// rollback, a rolled back or complete upgrade, an upgrade past its point
// of no return (the switching step started, the storage migration
// started), a process running a plan, etcd unhealthy, two API servers
// down, one down that the rollback does not restore.
func TestRollbackRefusals(t *testing.T) {
	f := newFakeKube(t)
	st, up := newKubePlan(t, f)
	up = upgradeUntil(t, f, st, up, kubeversion.StepSwitchEmulation)
	stepOf := func(p *plan.Plan, kind string) int {
		for i, s := range p.Steps {
			if s.Kind == kind {
				return i
			}
		}
		t.Fatalf("no %s step", kind)
		return -1
	}
	with := func(mod func(p *plan.Plan)) *plan.Plan {
		b := mustGet(t, st, up.ID)
		mod(b)
		return b
	}
	for _, tc := range []struct {
		name   string
		latest *plan.Plan
		kind   error
		msg    string
	}{
		{"no plan", nil, ErrNoUpgradeToRollBack, "no kube-upgrade plan to roll back: there is no plan"},
		{"another kind open", &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Failed}, ErrPlanOpen, "upgrade plan upgrade-1 is failed: a Kubernetes rollback starts only once no other plan is open"},
		{"another kind last", &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Done}, ErrNoUpgradeToRollBack, "the latest plan is upgrade plan upgrade-1 (done)"},
		{"a rollback open", &plan.Plan{ID: "r-1", Kind: KindKubeRollback, State: plan.Failed, Of: up.ID, Steps: []plan.Step{{Kind: StepRollbackStarted, State: plan.Failed}}}, ErrRollbackOpen, "kube-rollback plan r-1 (of " + up.ID + ") is failed at rollback-started-failed"},
		{"rolled back", with(func(p *plan.Plan) { p.State = plan.RolledBack }), ErrNoUpgradeToRollBack, "was rolled back already"},
		{"complete", with(func(p *plan.Plan) { p.State = plan.Done }), ErrPointOfNoReturn, "is complete"},
		{"switching started", with(func(p *plan.Plan) { p.Steps[stepOf(p, kubeversion.StepSwitchEmulation)].State = plan.Running }), ErrPointOfNoReturn,
			"passed its point of no return: step 8 (switching-emulated-version) is running: the API servers may run without --emulated-version=1.35"},
		{"migrating failed", with(func(p *plan.Plan) {
			p.Steps[stepOf(p, kubeversion.StepSwitchEmulation)].State = plan.Done
			p.Steps[stepOf(p, kubeversion.StepStorageMigrate)].State = plan.Failed
			p.State = plan.Failed
		}), ErrPointOfNoReturn, "step 8 (switching-emulated-version) is done"},
	} {
		_, err := RollbackOf(tc.latest)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.kind, tc.msg)
		}
	}
	if _, err := RollbackOf(mustGet(t, st, up.ID)); err != nil {
		t.Errorf("before the point of no return: %v", err)
	}
	// Aborted before the point of no return: it may be rolled back.
	if _, err := RollbackOf(with(func(p *plan.Plan) { p.State = plan.Aborted })); err != nil {
		t.Errorf("aborted: %v", err)
	}

	// A process running a plan.
	lock, err := st.TryLock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rollbackSubject(st); !errors.Is(err, ErrPlanRunning) {
		t.Errorf("locked: %v", err)
	}
	lock.Release()
	if _, err := rollbackSubject(plan.OpenStore(t.TempDir())); !errors.Is(err, ErrNoUpgradeToRollBack) {
		t.Errorf("empty store: %v", err)
	}

	// Health: nothing written, no plan saved.
	f.mu.Lock()
	n := len(f.writes)
	f.mu.Unlock()
	refused := func(name, msg string) {
		t.Helper()
		_, err := NewRollback(t.Context(), f, up, time.Now())
		if !errors.Is(err, kubeversion.ErrUnhealthy) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want it to say %q", name, err, msg)
		}
		if len(f.writes) != n {
			t.Errorf("%s: written %v", name, f.writes[n:])
		}
	}
	f.etcdBad = "2 of 3 etcd members healthy"
	refused("etcd", "etcd beneath: 2 of 3 etcd members healthy")
	f.etcdBad = ""
	f.notReady, f.noMirror = "node-a", "node-c"
	refused("two down", "the API servers of hosts node-a, node-c are not ready")
	f.noMirror = ""
	// One down that the rollback does not restore: nothing of node-a's
	// API server kept.
	f.mu.Lock()
	delete(f.kept[up.ID], "node-a/kube-apiserver")
	f.mu.Unlock()
	refused("down, not restored", "host node-a: its API server is not ready and the rollback does not restore it")
	if latest, _ := st.Latest(); latest.ID != up.ID {
		t.Errorf("a refusal saved plan %s", latest.ID)
	}
}

// TestSwitchEmulationResumes: the plan as a kill at
// kube-emulation-switched:HOST/COMPONENT leaves it, for every component
// of the switching step: the manifest without the flag, the component
// not yet running it. Resumed, the step writes it no second time and
// the plan completes.
func TestSwitchEmulationResumes(t *testing.T) {
	for _, comp := range kubeversion.ControlPlane {
		for _, host := range hosts {
			point := PointEmulationSwitched + ":" + host + "/" + comp
			t.Run(point, func(t *testing.T) {
				f := newFakeKube(t)
				st, p := newKubePlan(t, f)
				p = upgradeUntil(t, f, st, p, kubeversion.StepSwitchEmulation)
				ex := &Executor{Env: f, Poll: time.Millisecond, Timeout: 5 * time.Second}
				// The switch done for the components before this one.
				pl := mustPayload(t, p)
				order := []PlannedComponent{}
				for _, c := range []string{kubeversion.APIServer, kubeversion.ControllerManager, kubeversion.Scheduler} {
					for _, pc := range pl.Components {
						if pc.Component == c {
							order = append(order, pc)
						}
					}
				}
				for _, pc := range order {
					if pc.Host == host && pc.Component == comp {
						break
					}
					if err := ex.switchOne(t.Context(), p.ID, pl, pc); err != nil {
						t.Fatal(err)
					}
				}
				k := host + "/" + comp
				nb, err := WithoutFlag(f.man[k], comp, kubeversion.EmulatedVersionFlag)
				if err != nil {
					t.Fatal(err)
				}
				f.mu.Lock()
				f.man[k], f.lag[k] = nb, 3
				f.writes = nil
				f.mu.Unlock()
				p.Steps[len(p.Steps)-3].State = plan.Running
				if err := st.Save(t.Context(), p); err != nil {
					t.Fatal(err)
				}
				if err := plan.Run(t.Context(), st, p.ID, ex, nil); err != nil {
					t.Fatalf("resume: %v", err)
				}
				if slices.Contains(f.writes, k+"~emulation") {
					t.Errorf("%s written again on resume: %v", k, f.writes)
				}
				if got := mustGet(t, st, p.ID); got.State != plan.Done {
					t.Errorf("plan %s", got.State)
				}
				if f.maxDown > 1 {
					t.Errorf("%d API servers down at once", f.maxDown)
				}
			})
		}
	}
}
