package restore

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/memberrt/memberrttest"
	"github.com/etcd-steward/steward/pkg/spec"
)

// seamCluster is a cluster of three members, etcd-1 on this machine and
// etcd-2 and etcd-3 on host h2, whose members run in in-memory runtimes
// (one per agent, each knowing its own members, stopped): no agent, no
// etcd.
func seamCluster(t *testing.T) (*cluster.Cluster, map[string]*memberrttest.Runtime) {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: binaries.EmbeddedVersion(), StewardDir: dir, TLSOff: true, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.Agents = append(s.Agents, spec.Agent{Name: "h2", Host: "10.0.0.2", Port: spec.DefaultAgentPort})
	s.Members[1].Agent, s.Members[2].Agent = "h2", "h2"
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	rts := map[string]*memberrttest.Runtime{}
	for _, a := range s.Agents {
		rts[a.Name] = memberrttest.New()
	}
	for _, m := range s.Members {
		if _, err := rts[m.Agent].PutMember(t.Context(), c.MemberConfig(m)); err != nil {
			t.Fatal(err)
		}
	}
	c.Runtimes = func(agent string) (memberrt.Runtime, error) {
		if rt, ok := rts[agent]; ok {
			return rt, nil
		}
		return nil, fmt.Errorf("agent %q is not in the cluster spec", agent)
	}
	return c, rts
}

// callsSince returns a runtime's calls after its first n (the setup's).
func callsSince(rt *memberrttest.Runtime, n int) []string { return rt.Calls()[n:] }

// TestRequireStoppedAsksEveryRuntime: every agent's runtime is asked for
// its members; one running or starting refuses naming it; a runtime that
// does not answer (memberrt.ErrUnreachable) reports nothing running, as a
// stopped agent does; any other error of a runtime is returned.
func TestRequireStoppedAsksEveryRuntime(t *testing.T) {
	c, rts := seamCluster(t)
	if err := requireStopped(t.Context(), c); err != nil {
		t.Fatalf("every member stopped: %v", err)
	}
	for name, rt := range rts {
		if got := callsSince(rt, len(rt.Calls())-1); !slices.Equal(got, []string{"Members"}) {
			t.Errorf("runtime of %s: last call %q, want Members", name, got)
		}
	}

	for _, state := range []string{memberrt.StateRunning, memberrt.StateStarting} {
		c, rts := seamCluster(t)
		rts["h2"].Run("etcd-3", c.Spec.Version, state)
		err := requireStopped(t.Context(), c)
		if !errors.Is(err, ErrMembersRunning) || err.Error() != "refusing to restore while member etcd-3 is running: stop the cluster first" {
			t.Errorf("etcd-3 %s on h2: %v; want ErrMembersRunning naming etcd-3", state, err)
		}
	}

	c, rts = seamCluster(t)
	rts["h2"].Run("etcd-3", c.Spec.Version, memberrt.StateRunning)
	rts["h2"].Refuse["Members"] = fmt.Errorf("agent %w at https://10.0.0.2:2378: connection refused", memberrt.ErrUnreachable)
	if err := requireStopped(t.Context(), c); err != nil {
		t.Errorf("h2 unreachable: %v; want nothing reported running there", err)
	}

	c, rts = seamCluster(t)
	boom := errors.New("agent h2: internal error")
	rts["h2"].Refuse["Members"] = boom
	if err := requireStopped(t.Context(), c); !errors.Is(err, boom) || errors.Is(err, ErrMembersRunning) {
		t.Errorf("h2 failing: %v; want its error", err)
	}

	c, _ = seamCluster(t)
	c.Runtimes = func(agent string) (memberrt.Runtime, error) { return nil, fmt.Errorf("agent %q: no runtime", agent) }
	if err := requireStopped(t.Context(), c); err == nil || !strings.Contains(err.Error(), "no runtime") {
		t.Errorf("no runtime: %v; want its error", err)
	}
}

// TestStageOnOtherHosts: a member on another host is staged by its
// runtime, from the snapshot's path; when one fails, the dirs staged
// before it are discarded by their runtimes and the error names the
// member and its host.
func TestStageOnOtherHosts(t *testing.T) {
	c, rts := seamCluster(t)
	rt := rts["h2"]
	setup := len(rt.Calls())
	targets := c.Spec.Members[1:]
	p := prepared{snapshot: filepath.Join(t.TempDir(), "restore.db"), revision: 7}
	staged, err := stage(t.Context(), c, p, targets)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"StageDataDir etcd-2 " + p.snapshot, "StageDataDir etcd-3 " + p.snapshot}
	if got := callsSince(rt, setup); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	for _, m := range targets {
		if cfg, _ := rt.Config(m.Name); staged[m.Name] != cfg.DataDir+".staged" {
			d := cfg.DataDir + ".staged"
			t.Errorf("staged %s = %q, want %q (the runtime's)", m.Name, staged[m.Name], d)
		}
	}
	if len(rts[spec.LocalAgent].Calls()) != 1 {
		t.Errorf("this machine's runtime was called: %q", rts[spec.LocalAgent].Calls())
	}

	c, rts = seamCluster(t)
	rt = rts["h2"]
	setup = len(rt.Calls())
	rt.Refuse["StageDataDir etcd-3"] = errors.New("no space left on device")
	_, err = stage(t.Context(), c, p, c.Spec.Members[1:])
	if err == nil || err.Error() != "restore member etcd-3: on host h2: no space left on device" {
		t.Fatalf("stage = %v; want the failure naming etcd-3 and h2", err)
	}
	cfg, _ := rt.Config("etcd-2")
	d2 := cfg.DataDir + ".staged"
	want = []string{"StageDataDir etcd-2 " + p.snapshot, "StageDataDir etcd-3 " + p.snapshot, "DiscardStaged etcd-2 " + d2}
	if got := callsSince(rt, setup); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// TestCommitOnOtherHostsStops: a member on another host is committed by
// its runtime; one that fails stops the commit there, naming the member
// and its host, as an interrupted restore (the marker stays).
func TestCommitOnOtherHostsStops(t *testing.T) {
	c, rts := seamCluster(t)
	rt := rts["h2"]
	setup := len(rt.Calls())
	rt.Refuse["CommitDataDir etcd-3"] = errors.New("rename: permission denied")
	staged := map[string]string{"etcd-2": "/d/etcd-2.staged", "etcd-3": "/d/etcd-3.staged"}
	err := commit(t.Context(), c, c.Spec.Members[1:], staged, spec.Timeline{ID: 2})
	if !errors.Is(err, cluster.ErrRestoreInterrupted) || !strings.HasPrefix(err.Error(), "put restored data dir of etcd-3 in place on host h2: rename: permission denied; ") {
		t.Fatalf("commit = %v; want an interrupted restore naming etcd-3 and h2", err)
	}
	want := []string{"CommitDataDir etcd-2 /d/etcd-2.staged", "CommitDataDir etcd-3 /d/etcd-3.staged"}
	if got := callsSince(rt, setup); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if err := cluster.RequireNoRestorePending(c.Dir, "start the members"); err == nil {
		t.Error("the marker of the unfinished commit is gone")
	}
}
