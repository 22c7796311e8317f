package carotate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// TestNewPlan: the phases in order, one restart per member after the drop,
// the cross-signed CA retired last;
// a cluster without TLS is refused; one with joined hosts names them in
// the steps that work on the hosts.
func TestNewPlan(t *testing.T) {
	newCluster := func(t *testing.T, edit func(*spec.Cluster)) *cluster.Cluster {
		t.Helper()
		dir := t.TempDir()
		s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		s.ApplyDefaults()
		if edit != nil {
			edit(s)
		}
		return &cluster.Cluster{Dir: dir, Spec: s}
	}
	tests := []struct {
		name  string
		edit  func(*spec.Cluster)
		want  []string
		error error
		// desc, when set, is named by the trust, reissue and drop steps.
		desc string
		// leader is the member leading when the plan is made.
		leader string
	}{
		{name: "three members", want: []string{StepPrepare, StepTrust, StepReissue, StepClients, StepDrop,
			StepRestart + ":etcd-1", StepRestart + ":etcd-2", StepRestart + ":etcd-3", StepRetire}},
		{name: "leader restarted last", leader: "etcd-1", want: []string{StepPrepare, StepTrust, StepReissue, StepClients, StepDrop,
			StepRestart + ":etcd-2", StepRestart + ":etcd-3", StepRestart + ":etcd-1", StepRetire}},
		{name: "no TLS", edit: func(s *spec.Cluster) { s.TLS.Disabled = true }, error: ErrTLSDisabled},
		{name: "joined host", edit: func(s *spec.Cluster) {
			s.Agents = append(s.Agents, spec.Agent{Name: "h2", Host: "10.0.0.2", Port: 2378})
			s.Members[2].Agent = "h2"
		}, want: []string{StepPrepare, StepTrust, StepReissue, StepClients, StepDrop,
			StepRestart + ":etcd-1", StepRestart + ":etcd-2", StepRestart + ":etcd-3", StepRetire}, desc: "h2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlan(newCluster(t, tt.edit), tt.leader, time.Now())
			if tt.error != nil {
				if !errors.Is(err, tt.error) {
					t.Fatalf("NewPlan: %v, want %v", err, tt.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind != plan.KindCARotation || p.State != plan.Pending {
				t.Fatalf("plan %s is %s %s", p.ID, p.Kind, p.State)
			}
			var got []string
			for i, s := range p.Steps {
				if s.Index != i || s.State != plan.Pending || s.Description == "" {
					t.Errorf("step %d: %+v", i, s)
				}
				k := s.Kind
				if s.Member != "" {
					k += ":" + s.Member
				}
				got = append(got, k)
				if tt.desc != "" && (s.Kind == StepTrust || s.Kind == StepReissue || s.Kind == StepDrop || s.Kind == StepRetire) && !strings.Contains(s.Description, tt.desc) {
					t.Errorf("step %d (%s) does not name %s: %q", i, s.Kind, tt.desc, s.Description)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("steps %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("steps %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestApplyRefusesWhileAPlanIsActive: with a failed upgrade plan waiting,
// rotate-ca is refused with one error naming the plan and what to do, and
// nothing is written: no new plan, no new CA.
func TestApplyRefusesWhileAPlanIsActive(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	if err := pki.Ensure(c.CertDir(), s.Name, nil); err != nil {
		t.Fatal(err)
	}
	up := &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Failed, CreatedAt: time.Now(),
		Steps: []plan.Step{{Index: 0, Kind: "preflight", State: plan.Failed}}}
	if err := c.Plans().Save(t.Context(), up); err != nil {
		t.Fatal(err)
	}
	_, err = Apply(t.Context(), c)
	if ae, ok := errors.AsType[*plan.ActiveError](err); !ok || !ae.Abort || ae.Plan.ID != "upgrade-1" || err.Error() != "upgrade plan upgrade-1 is failed" {
		t.Fatalf("Apply with a failed upgrade plan: %v", err)
	}
	if latest, err := c.Plans().Latest(); err != nil || latest.ID != "upgrade-1" {
		t.Fatalf("latest plan after the refusal: %+v, %v", latest, err)
	}
	if _, err := os.Stat(filepath.Join(c.CertDir(), pki.CANextCert)); !os.IsNotExist(err) {
		t.Fatalf("a refused rotation created %s: %v", pki.CANextCert, err)
	}
}

// TestFileStepsWaitForARenewal: a rotation's file step waits while a
// renewal holds the certificate directory's lock (a renewal signing with
// the old CA must not land on a leaf the rotation reissued), and runs once
// it is released.
func TestFileStepsWaitForARenewal(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.Ensure(c.CertDir(), s.Name, nil); err != nil {
		t.Fatal(err)
	}
	lock, err := certs.Lock(t.Context(), c, 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		e := &Executor{C: c}
		done <- e.Execute(t.Context(), &plan.Plan{}, &plan.Step{Kind: StepPrepare})
	}()
	select {
	case err := <-done:
		t.Fatalf("prepare ran while a renewal held the lock: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := os.Stat(filepath.Join(c.CertDir(), pki.CANextCert)); !os.IsNotExist(err) {
		t.Fatalf("%s written while a renewal held the lock: %v", pki.CANextCert, err)
	}
	lock.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("prepare after the renewal: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("prepare did not run after the lock was released")
	}
	if _, err := os.Stat(filepath.Join(c.CertDir(), pki.CANextCert)); err != nil {
		t.Fatalf("prepare wrote no next CA: %v", err)
	}
}

// TestOneTransferPerRotation runs the restart steps of a plan on a model
// of leadership (the leader's restart hands it to the member
// rolling.Transferee picks over pendingRestarts) and counts the transfers: one, whoever
// leads when the plan is made, and at most two when the leader changed
// since (the plan then restarts it before the new one).
func TestOneTransferPerRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster.Cluster{Dir: dir, Spec: s}
	run := func(p *plan.Plan, leader string) int {
		transfers := 0
		for i := range p.Steps {
			st := &p.Steps[i]
			if st.Kind == StepRestart && st.Member == leader {
				seen := &status.Status{}
				for _, m := range s.Members {
					seen.Members = append(seen.Members, status.MemberStatus{Name: m.Name, Healthy: true, InSpec: true, Role: "follower"})
				}
				leader = rolling.Transferee(seen, leader, pendingRestarts(p, st.Index))
				transfers++
			}
			st.State = plan.Done
		}
		return transfers
	}
	for _, m := range s.Members {
		p, err := NewPlan(c, m.Name, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if n := run(p, m.Name); n != 1 {
			t.Errorf("leader %s when planned and run: %d transfers, want 1", m.Name, n)
		}
		for _, o := range s.Members {
			p, _ := NewPlan(c, m.Name, time.Now())
			if n := run(p, o.Name); n > 2 {
				t.Errorf("planned with leader %s, run with leader %s: %d transfers, want at most 2", m.Name, o.Name, n)
			}
		}
	}
}

// TestOldPlanResumes: a rotation plan an older Steward wrote (no
// ca-retire-cross step), stopped in its restarts, gets the retire step
// appended when resumed and runs it last; the steps done stay done and
// their indexes unchanged. A plan that has the step, or another kind, is
// left alone.
func TestOldPlanResumes(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster.Cluster{Dir: dir, Spec: s}
	p, err := NewPlan(c, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The plan as the old code wrote it: no retire step.
	p.Steps = p.Steps[:len(p.Steps)-1]
	n := len(p.Steps)
	for i := range p.Steps[:n-1] {
		p.Steps[i].State, p.Steps[i].Attempts = plan.Done, 1
	}
	p.State = plan.Failed
	store := c.Plans()
	if err := store.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	var ran []string
	ex := execFunc(func(_ *plan.Plan, st *plan.Step) error {
		ran = append(ran, st.Kind)
		return nil
	})
	if err := plan.RunAmended(t.Context(), store, p.ID, ex, amend(c), nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{StepRestart, StepRetire}; strings.Join(ran, ",") != strings.Join(want, ",") {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	got, err := store.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != plan.Done || len(got.Steps) != n+1 {
		t.Fatalf("after the resume: %s with %d steps, want done with %d", got.State, len(got.Steps), n+1)
	}
	last := got.Steps[n]
	if last.Index != n || last.Kind != StepRetire || last.State != plan.Done || last.Description == "" {
		t.Errorf("the appended step: %+v", last)
	}
	for i := range got.Steps[:n-1] {
		if got.Steps[i].Attempts != 1 || got.Steps[i].Index != i {
			t.Errorf("step %d changed: %+v", i, got.Steps[i])
		}
	}
	if amend(c)(got) {
		t.Error("a plan with the retire step amended again")
	}
	if amend(c)(&plan.Plan{Kind: plan.KindCARotationRollback, Steps: []plan.Step{{Kind: StepRollbackLeaves}}}) {
		t.Error("a rollback plan amended")
	}
}

type execFunc func(*plan.Plan, *plan.Step) error

func (f execFunc) Execute(_ context.Context, p *plan.Plan, s *plan.Step) error { return f(p, s) }
