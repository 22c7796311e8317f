package upgrade

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/memberrt/memberrttest"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// seamCluster is a cluster of n members on the embedded version whose
// members run in an in-memory runtime: no agent, no etcd.
func seamCluster(t *testing.T, n int) (*cluster.Cluster, *memberrttest.Runtime) {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: n, Version: binaries.EmbeddedVersion(), StewardDir: dir, TLSOff: true, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.Backup.Continuous = false
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	if err := s.Save(c.SpecPath()); err != nil {
		t.Fatal(err)
	}
	rt := memberrttest.New()
	c.Runtimes = func(string) (memberrt.Runtime, error) { return rt, nil }
	return c, rt
}

func names(c *cluster.Cluster) []string { return c.Spec.MemberNames() }

func wantCalls(t *testing.T, rt *memberrttest.Runtime, want ...string) {
	t.Helper()
	if got := rt.Calls(); !slices.Equal(got, want) {
		t.Errorf("runtime calls:\n got %q\nwant %q", got, want)
	}
}

// TestSwapMemberVersion: the runtime learns the member's whole config
// (on the new version) before it swaps the version; a refused config
// swaps nothing.
func TestSwapMemberVersion(t *testing.T) {
	c, rt := seamCluster(t, 3)
	v := binaries.EmbeddedVersion()
	n := names(c)
	rt.Run(n[1], "3.5.21", memberrt.StateRunning)
	if err := SwapMemberVersion(t.Context(), c, n[1], v, true); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rt, "PutMember "+n[1]+" "+v, "SwapVersion "+n[1]+" "+v+" allow-minor-downgrade")
	m, _ := c.Member(n[1])
	if cfg, _ := rt.Config(n[1]); cfg.DataDir != c.MemberConfig(m).DataDir || cfg.Version != v {
		t.Errorf("config given: %+v", cfg)
	}
	if st, _ := rt.Member(t.Context(), n[1]); st.State != memberrt.StateRunning || st.Version != v {
		t.Errorf("after the swap: %+v", st)
	}

	c, rt = seamCluster(t, 3)
	refused := errors.New("no room")
	rt.Refuse["PutMember"] = refused
	err := SwapMemberVersion(t.Context(), c, n[0], v, false)
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "configure member "+n[0]) {
		t.Fatalf("refused config: %v", err)
	}
	wantCalls(t, rt, "PutMember "+n[0]+" "+v)
}

// TestStartStep: the restore strategy's start step swaps every member
// the runtime does not already run on the step's version (stopped, or on
// another version), in spec order, and leaves those that do alone. Its
// health gate asks etcd, which is not there: the step fails at the gate,
// after the runtime did its part.
func TestStartStep(t *testing.T) {
	c, rt := seamCluster(t, 3)
	v := binaries.EmbeddedVersion()
	n := names(c)
	rt.Run(n[0], v, memberrt.StateRunning)
	rt.Run(n[1], v, memberrt.StateStopped)
	rt.Run(n[2], "3.5.21", memberrt.StateRunning)
	e := &Executor{C: c, HealthTimeout: time.Second}
	p := &plan.Plan{Steps: []plan.Step{{Index: 0, Kind: StepStart, Version: v}}}
	err := e.Execute(t.Context(), p, &p.Steps[0])
	if err == nil || !strings.Contains(err.Error(), "health gate") {
		t.Fatalf("want the health gate to fail without etcd, got %v", err)
	}
	wantCalls(t, rt,
		"Member "+n[0],
		"Member "+n[1], "PutMember "+n[1]+" "+v, "SwapVersion "+n[1]+" "+v,
		"Member "+n[2], "PutMember "+n[2]+" "+v, "SwapVersion "+n[2]+" "+v)
	for _, name := range n {
		if st, _ := rt.Member(t.Context(), name); st.State != memberrt.StateRunning || st.Version != v {
			t.Errorf("%s after the step: %+v", name, st)
		}
	}
}

// TestStartStepRefused: a runtime refusing a swap fails the step at once
// with its error, naming the member; the members after it are untouched.
func TestStartStepRefused(t *testing.T) {
	c, rt := seamCluster(t, 3)
	v := binaries.EmbeddedVersion()
	n := names(c)
	for _, name := range n {
		rt.Run(name, v, memberrt.StateStopped)
	}
	refused := errors.New("etcd " + v + " is not in the binary store")
	rt.Refuse["SwapVersion "+n[1]] = refused
	e := &Executor{C: c, HealthTimeout: time.Minute}
	p := &plan.Plan{Steps: []plan.Step{{Index: 0, Kind: StepStart, Version: v}}}
	start := time.Now()
	err := e.Execute(t.Context(), p, &p.Steps[0])
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "swap member "+n[1]+" to etcd "+v) {
		t.Fatalf("want the refusal, got %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the refusal took %s: it waited for health", d)
	}
	wantCalls(t, rt,
		"Member "+n[0], "PutMember "+n[0]+" "+v, "SwapVersion "+n[0]+" "+v,
		"Member "+n[1], "PutMember "+n[1]+" "+v, "SwapVersion "+n[1]+" "+v)
	if st, _ := rt.Member(t.Context(), n[2]); st.State != memberrt.StateStopped {
		t.Errorf("%s was touched: %+v", n[2], st)
	}
}

// TestReplaceKillsFirst: replacing the data dirs kills every member first
// (SIGKILL, in spec order); a kill the runtime refuses stops the
// replacement there, before any member runs on a private port and
// before the spec names new data dirs.
func TestReplaceKillsFirst(t *testing.T) {
	c, rt := seamCluster(t, 3)
	v := binaries.EmbeddedVersion()
	n := names(c)
	for _, name := range n {
		rt.Run(name, v, memberrt.StateRunning)
	}
	refused := errors.New("kill refused")
	rt.Refuse["Kill "+n[1]] = refused
	before := slices.Clone(c.Spec.Members)
	_, err := ReplaceDataDirs(t.Context(), c, ReplaceOptions{Version: v, Target: v, Timeout: time.Second})
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "stop member "+n[1]) {
		t.Fatalf("want the refused kill, got %v", err)
	}
	wantCalls(t, rt, "Kill "+n[0], "Kill "+n[1])
	reopened, err := cluster.Open(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range reopened.Spec.Members {
		if m.DataDir != before[i].DataDir {
			t.Errorf("%s: data dir %s, was %s", m.Name, m.DataDir, before[i].DataDir)
		}
	}
}
