package carotate

import (
	"bytes"
	"crypto/x509"
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
	"github.com/etcd-steward/steward/pkg/spec"
)

// rotationAt returns a CA rotation plan of a three-member cluster whose
// steps before index at are done and step at is in state st (the plan in
// state ps).
func rotationAt(t *testing.T, at int, st, ps plan.State) *plan.Plan {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	p, err := NewPlan(&cluster.Cluster{Dir: dir, Spec: s}, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Steps {
		switch {
		case i < at:
			p.Steps[i].State = plan.Done
		case i == at:
			p.Steps[i].State = st
		}
	}
	p.State = ps
	return p
}

// TestRollbackOf: which plans a CA rotation rollback starts from, and the
// one-line refusal of each other case.
func TestRollbackOf(t *testing.T) {
	tests := []struct {
		name string
		p    *plan.Plan
		// err is the refusal wanted (nil: rolled back), with text in it.
		err  error
		text string
	}{
		{name: "aborted after the trust step", p: rotationAt(t, 2, plan.Pending, plan.Aborted)},
		{name: "aborted after the clients step", p: rotationAt(t, 4, plan.Pending, plan.Aborted)},
		{name: "failed at the reissue", p: rotationAt(t, 2, plan.Failed, plan.Failed)},
		{name: "interrupted in the clients step", p: rotationAt(t, 3, plan.Running, plan.Running)},
		{name: "never run", p: rotationAt(t, 0, plan.Pending, plan.Pending)},
		{name: "no plan", err: ErrNoRotationToRollBack, text: "there is no plan"},
		{name: "an upgrade", p: &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Failed}, err: ErrNoRotationToRollBack, text: "upgrade plan upgrade-1"},
		{name: "done", p: rotationAt(t, 99, plan.Pending, plan.Done), err: ErrRotationDone, text: "): its new CA is the CA"},
		{name: "rolled back", p: rotationAt(t, 2, plan.Pending, plan.RolledBack), err: ErrRolledBack, text: "rolled back already"},
		{name: "drop running", p: rotationAt(t, 4, plan.Running, plan.Running), err: ErrOldCADropped, text: "the old CA was dropped at step 5"},
		{name: "drop failed", p: rotationAt(t, 4, plan.Failed, plan.Failed), err: ErrOldCADropped, text: "step 5"},
		{name: "aborted in the restarts", p: rotationAt(t, 6, plan.Pending, plan.Aborted), err: ErrOldCADropped, text: "step 5"},
		{name: "a rollback that failed", p: &plan.Plan{ID: "r-1", Kind: plan.KindCARotationRollback, State: plan.Failed}, text: "CA rotation rollback r-1 is failed"},
		{name: "a rollback done", p: &plan.Plan{ID: "r-1", Kind: plan.KindCARotationRollback, State: plan.Done}, err: ErrNoRotationToRollBack, text: "r-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RollbackOf(tt.p)
			if tt.err == nil && tt.text == "" {
				if err != nil {
					t.Fatalf("RollbackOf: %v, want none", err)
				}
				return
			}
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("RollbackOf: %v, want %v with %q", err, tt.err, tt.text)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the refusal is more than one line: %q", err)
			}
		})
	}
}

// TestNewRollbackPlan: the rollback's steps in order, naming the hosts
// where they work on them, and the rotation it rolls back; a rotation past
// its drop is refused.
func TestNewRollbackPlan(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	s.Agents = append(s.Agents, spec.Agent{Name: "h2", Host: "10.0.0.2", Port: 2378})
	s.Members[2].Agent = "h2"
	c := &cluster.Cluster{Dir: dir, Spec: s}
	of := rotationAt(t, 3, plan.Pending, plan.Aborted)
	of.HealthTimeoutSeconds = 30
	p, err := NewRollbackPlan(c, of, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != plan.KindCARotationRollback || p.State != plan.Pending || p.Of != of.ID || p.HealthTimeoutSeconds != 30 {
		t.Fatalf("plan %s: kind %s, state %s, of %q, health timeout %d", p.ID, p.Kind, p.State, p.Of, p.HealthTimeoutSeconds)
	}
	want := []string{StepRollbackLeaves, StepRollbackClients, StepTrustOld, StepRetireNext}
	if len(p.Steps) != len(want) {
		t.Fatalf("steps %+v, want %v", p.Steps, want)
	}
	for i, st := range p.Steps {
		if st.Index != i || st.Kind != want[i] || st.State != plan.Pending || st.Description == "" || st.Member != "" {
			t.Errorf("step %d: %+v, want kind %s", i, st, want[i])
		}
		if (st.Kind == StepRollbackLeaves || st.Kind == StepTrustOld) && !strings.Contains(st.Description, "h2") {
			t.Errorf("step %d (%s) does not name host h2: %q", i, st.Kind, st.Description)
		}
	}
	if _, err := NewRollbackPlan(c, rotationAt(t, 5, plan.Pending, plan.Aborted), time.Now()); !errors.Is(err, ErrOldCADropped) {
		t.Errorf("NewRollbackPlan after the drop: %v, want ErrOldCADropped", err)
	}
}

// TestRollbackRefusalsChangeNothing: `steward rollback` with no plan, with
// a CA rotation done, and with one another process runs (its lock held):
// one error each, no plan saved, no file of the certificate directory
// changed.
func TestRollbackRefusalsChangeNothing(t *testing.T) {
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
	if err := certs.RotationPrepare(c.CertDir(), s.Name, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.RotationTrustBoth(c.CertDir()); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		ents, _ := os.ReadDir(c.CertDir())
		for _, d := range ents {
			b, _ := os.ReadFile(filepath.Join(c.CertDir(), d.Name()))
			out[d.Name()] = string(b)
		}
		return out
	}
	before := snapshot()
	check := func(what string, want error, text string) {
		t.Helper()
		latest, _ := c.Plans().Latest()
		_, err := Rollback(t.Context(), c)
		if err == nil || (want != nil && !errors.Is(err, want)) || !strings.Contains(err.Error(), text) {
			t.Errorf("rollback %s: %v, want %v with %q", what, err, want, text)
		}
		after, _ := c.Plans().Latest()
		if (latest == nil) != (after == nil) || (latest != nil && (latest.ID != after.ID || latest.State != after.State)) {
			t.Errorf("rollback %s changed the latest plan: %+v -> %+v", what, latest, after)
		}
		got := snapshot()
		if len(got) != len(before) {
			t.Errorf("rollback %s changed the certificate directory's files", what)
		}
		for k, v := range before {
			if got[k] != v {
				t.Errorf("rollback %s changed %s", what, k)
			}
		}
	}
	check("with no plan", ErrNoRotationToRollBack, "there is no plan")
	done := rotationAt(t, 99, plan.Pending, plan.Done)
	if err := c.Plans().Save(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	check("of a rotation done", ErrRotationDone, done.ID)
	running := rotationAt(t, 3, plan.Running, plan.Running)
	running.ID += "-2"
	if err := c.Plans().Save(t.Context(), running); err != nil {
		t.Fatal(err)
	}
	lock, err := c.Plans().TryLock()
	if err != nil {
		t.Fatal(err)
	}
	check("of a rotation another process runs", ErrPlanRunning, "another steward process is running a plan")
	lock.Release()
}

// TestRollbackOnAJoinedHost: a rotation stopped after its clients step on
// a coordinator with a joined host (its real agent), then the rollback's
// steps, each run twice: the host's leaves are the old CA's again (keys
// kept, no CA after them, no previous copy left) and served by its agent,
// its ca.crt and the coordinator's the old CA alone, the new CA moved aside
// here, and the hosts' renewals work again. Trusting the old CA alone
// before the leaves are back is refused, changing nothing on the host.
func TestRollbackOnAJoinedHost(t *testing.T) {
	c, certDir, hostDir, ln, _ := joinedHost(t)
	oldCA, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]byte{}
	for _, n := range pki.HostLeafNames {
		keys[n], _ = os.ReadFile(filepath.Join(hostDir, n+".key"))
	}
	rot, err := NewPlan(c, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{C: c, HealthTimeout: 20 * time.Second}
	for i := range rot.Steps {
		st := &rot.Steps[i]
		if st.Kind == StepDrop {
			break
		}
		if err := e.Execute(t.Context(), rot, st); err != nil {
			t.Fatalf("rotation step %d %s: %v", i, st.Kind, err)
		}
		st.State = plan.Done
	}
	rot.State = plan.Aborted
	next, err := os.ReadFile(filepath.Join(certDir, pki.CANextCert))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewRollbackPlan(c, rot, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		ents, _ := os.ReadDir(hostDir)
		for _, d := range ents {
			b, _ := os.ReadFile(filepath.Join(hostDir, d.Name()))
			out[d.Name()] = string(b)
		}
		return out
	}
	re := &RollbackExecutor{C: c, HealthTimeout: 20 * time.Second}
	before := snapshot()
	if err := re.Execute(t.Context(), p, &plan.Step{Kind: StepTrustOld}); err == nil {
		t.Error("trusting the old CA alone before the leaves are the old CA's again: no error")
	}
	if after := snapshot(); after[pki.CACert] != before[pki.CACert] {
		t.Error("a refused trust step changed the host's ca.crt")
	}
	for i := range p.Steps {
		st := &p.Steps[i]
		if err := re.Execute(t.Context(), p, st); err != nil {
			t.Fatalf("rollback step %d %s: %v", i, st.Kind, err)
		}
		before := snapshot()
		if err := re.Execute(t.Context(), p, st); err != nil {
			t.Fatalf("rollback step %d %s again: %v", i, st.Kind, err)
		}
		after := snapshot()
		if len(after) != len(before) {
			t.Errorf("rollback step %d %s again changed the host's files", i, st.Kind)
		}
		for k, v := range before {
			if after[k] != v {
				t.Errorf("rollback step %d %s again changed the host's %s", i, st.Kind, k)
			}
		}
	}
	if cb, _ := os.ReadFile(filepath.Join(certDir, pki.CACert)); !bytes.Equal(cb, oldCA) {
		t.Fatalf("the coordinator's ca.crt is not the old CA alone:\n%s", cb)
	}
	if hb, _ := os.ReadFile(filepath.Join(hostDir, pki.CACert)); !bytes.Equal(hb, oldCA) {
		t.Fatalf("the host's ca.crt is not the old CA alone:\n%s", hb)
	}
	old, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range pki.HostLeafNames {
		fb, _ := os.ReadFile(filepath.Join(hostDir, n+".crt"))
		leaf, chain, err := pki.ParseLeafChainPEM(fb)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.CheckSignatureFrom(old) != nil || len(chain) != 0 {
			t.Errorf("host %s: issuer %q, %d CA certificates after it; want the old CA's alone", n, leaf.Issuer.CommonName, len(chain))
		}
		if k, _ := os.ReadFile(filepath.Join(hostDir, n+".key")); !bytes.Equal(k, keys[n]) {
			t.Errorf("host %s.key changed", n)
		}
		if _, err := os.Stat(filepath.Join(hostDir, n+".crt"+pki.PrevSuffix)); err == nil {
			t.Errorf("host %s: previous certificate left", n)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(old)
	if got, err := pki.ServedCert(t.Context(), ln.Addr().String(), pool, nil); err != nil || got.CheckSignatureFrom(old) != nil {
		t.Errorf("the host's agent serves %v (%v), not a certificate of the old CA", got, err)
	}
	if pki.RotationInProgress(certDir) {
		t.Error("ca-next.crt still there after the rollback")
	}
	aside, _ := filepath.Glob(filepath.Join(certDir, pki.CANextCert+pki.AbortedSuffix+"*"))
	if len(aside) != 1 {
		t.Fatalf("the new CA moved aside: %v, want one file", aside)
	}
	if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, next) {
		t.Error("the file moved aside is not the new CA")
	}
	if rs, err := certs.RenewHosts(t.Context(), c, []string{"server"}, true, 20*time.Second); err != nil || len(rs) != 1 {
		t.Errorf("renewing the host after the rollback: %+v, %v", rs, err)
	}
}

// TestRollbackAgainAfterAbort: a rollback aborted after its first step is
// planned again by the next Rollback (no member runs here: the served
// certificates are not waited for), which rolls back the same rotation to
// the end: the old CA alone, the new one moved aside, the rotation marked
// rolled back and the new rollback done.
func TestRollbackAgainAfterAbort(t *testing.T) {
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
	cd := c.CertDir()
	if err := pki.Ensure(cd, s.Name, nil); err != nil {
		t.Fatal(err)
	}
	oldCA, _ := os.ReadFile(filepath.Join(cd, pki.CACert))
	if err := certs.RotationPrepare(cd, s.Name, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := certs.RotationTrustBoth(cd); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.RotationReissue(cd, pki.Validity{}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	rot := rotationAt(t, 4, plan.Pending, plan.Aborted)
	if err := c.Plans().Save(t.Context(), rot); err != nil {
		t.Fatal(err)
	}
	first, err := NewRollbackPlan(c, rot, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first.ID += "-first"
	if err := (&RollbackExecutor{C: c}).Execute(t.Context(), first, &first.Steps[0]); err != nil {
		t.Fatal(err)
	}
	first.Steps[0].State, first.State = plan.Done, plan.Aborted
	if err := c.Plans().Save(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	p, err := Rollback(t.Context(), c)
	if err != nil {
		t.Fatalf("rollback after an aborted rollback: %v", err)
	}
	if p.ID == first.ID || p.Of != rot.ID {
		t.Fatalf("the new rollback %s rolls back %q, want a new plan of %s", p.ID, p.Of, rot.ID)
	}
	if got, _ := c.Plans().Get(p.ID); got.State != plan.Done {
		t.Errorf("the new rollback is %s, want done", got.State)
	}
	if got, _ := c.Plans().Get(rot.ID); got.State != plan.RolledBack {
		t.Errorf("the rotation is %s, want rolled back", got.State)
	}
	if latest, err := c.Plans().Latest(); err != nil || latest.ID != p.ID {
		t.Errorf("the latest plan after the rollback: %+v, %v; want the rollback %s", latest, err, p.ID)
	}
	if b, _ := os.ReadFile(filepath.Join(cd, pki.CACert)); !bytes.Equal(b, oldCA) {
		t.Error("ca.crt is not the old CA alone")
	}
	if pki.RotationInProgress(cd) {
		t.Error("ca-next.crt still there")
	}
}
