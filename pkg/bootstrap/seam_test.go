package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/memberrt/memberrttest"
	"github.com/etcd-steward/steward/pkg/spec"
)

// seamCluster is a cluster of three members, etcd-1 and etcd-2 on this
// machine and etcd-3 on host h2, whose members run in in-memory runtimes
// (one per agent, knowing no member yet): no agent, no etcd.
func seamCluster(t *testing.T) (*cluster.Cluster, map[string]*memberrttest.Runtime) {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: binaries.EmbeddedVersion(), StewardDir: dir, TLSOff: true, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.Agents = append(s.Agents, spec.Agent{Name: "h2", Host: "10.0.0.2", Port: spec.DefaultAgentPort})
	s.Members[2].Agent = "h2"
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	rts := map[string]*memberrttest.Runtime{spec.LocalAgent: memberrttest.New(), "h2": memberrttest.New()}
	c.Runtimes = func(agent string) (memberrt.Runtime, error) {
		if rt, ok := rts[agent]; ok {
			return rt, nil
		}
		return nil, fmt.Errorf("agent %q is not in the cluster spec", agent)
	}
	return c, rts
}

// said collects progress lines.
type said []string

func (s *said) say(format string, args ...any) { *s = append(*s, fmt.Sprintf(format, args...)) }

func wantCalls(t *testing.T, what string, rt *memberrttest.Runtime, want ...string) {
	t.Helper()
	if got := rt.Calls(); !slices.Equal(got, want) {
		t.Errorf("%s calls:\n got %q\nwant %q", what, got, want)
	}
}

func wantSaid(t *testing.T, got said, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("said:\n got %q\nwant %q", got, want)
	}
}

// TestStartMembers: up hands each member to the runtime of its agent
// (this machine's, or another host's once it answers) and starts it,
// saying which were running already; a member whose config is pending is
// restarted on the spec's when its agent was just started, and left with
// a note otherwise.
func TestStartMembers(t *testing.T) {
	t.Run("fresh", func(t *testing.T) {
		c, rts := seamCluster(t)
		v := c.Spec.Version
		var out said
		if err := startMembers(t.Context(), c, rts[spec.LocalAgent], false, map[string]bool{}, out.say); err != nil {
			t.Fatal(err)
		}
		wantCalls(t, "this machine's", rts[spec.LocalAgent], "PutMember etcd-1 "+v, "Start etcd-1", "PutMember etcd-2 "+v, "Start etcd-2")
		wantCalls(t, "h2's", rts["h2"], "Ping", "PutMember etcd-3 "+v, "Start etcd-3")
		m := c.Spec.Members
		wantSaid(t, out, "started member etcd-1 ("+m[0].ClientURL+")", "started member etcd-2 ("+m[1].ClientURL+")", "started member etcd-3 ("+m[2].ClientURL+")")
		if cfg, _ := rts["h2"].Config("etcd-3"); cfg.PeerURL != m[2].PeerURL || cfg.InitialClusterState != "new" {
			t.Errorf("etcd-3 configured as %+v; want the spec's config", cfg)
		}
	})

	t.Run("already running", func(t *testing.T) {
		c, rts := seamCluster(t)
		v := c.Spec.Version
		rts[spec.LocalAgent].Run("etcd-1", v, memberrt.StateRunning)
		rts["h2"].Run("etcd-3", v, memberrt.StateRunning)
		var out said
		running := runningMembers(t.Context(), rts[spec.LocalAgent])
		if err := startMembers(t.Context(), c, rts[spec.LocalAgent], false, running, out.say); err != nil {
			t.Fatal(err)
		}
		m := c.Spec.Members
		wantSaid(t, out, "member etcd-1 was already running ("+m[0].ClientURL+")", "started member etcd-2 ("+m[1].ClientURL+")", "member etcd-3 was already running ("+m[2].ClientURL+")")
	})

	for _, started := range []bool{true, false} {
		t.Run(fmt.Sprintf("older config, agent started %v", started), func(t *testing.T) {
			c, rts := seamCluster(t)
			v := c.Spec.Version
			local := rts[spec.LocalAgent]
			local.Run("etcd-1", "3.5.35", memberrt.StateRunning)
			var out said
			if err := startMembers(t.Context(), c, local, started, runningMembers(t.Context(), local), out.say); err != nil {
				t.Fatal(err)
			}
			u := c.Spec.Members[0].ClientURL
			if started {
				wantCalls(t, "this machine's", local, "Members", "PutMember etcd-1 "+v, "Restart etcd-1", "Start etcd-1", "PutMember etcd-2 "+v, "Start etcd-2")
				if out[0] != "started member etcd-1 ("+u+")" {
					t.Errorf("said %q", out[0])
				}
				return
			}
			wantCalls(t, "this machine's", local, "Members", "PutMember etcd-1 "+v, "Start etcd-1", "PutMember etcd-2 "+v, "Start etcd-2")
			// The plain words: a command's progress names the commands (cli.Progress).
			if want := []string{"note: member etcd-1 runs with an older config; stopping and starting it applies the spec", "member etcd-1 was already running (" + u + ")"}; !slices.Equal(out[:2], want) {
				t.Errorf("said %q, want %q first", out, want)
			}
		})
	}

	t.Run("host down", func(t *testing.T) {
		c, rts := seamCluster(t)
		down := errors.New("agent h2 on host 10.0.0.2 unreachable")
		rts["h2"].Refuse["Ping"] = down
		err := startMembers(t.Context(), c, rts[spec.LocalAgent], false, map[string]bool{}, nil)
		ad, ok := errors.AsType[*AgentDownError](err)
		if !ok || ad.Member != "etcd-3" || ad.Agent != "h2" || ad.Address != "https://10.0.0.2:2378" || ad.JoinFile != JoinPath(c.Dir, "h2") || !errors.Is(err, down) {
			t.Fatalf("startMembers = %#v; want an *AgentDownError for etcd-3 on h2", err)
		}
		if err.Error() != "member etcd-3: "+down.Error() {
			t.Errorf("message %q", err)
		}
		wantCalls(t, "h2's", rts["h2"], "Ping")
	})

	t.Run("config refused", func(t *testing.T) {
		c, rts := seamCluster(t)
		v := c.Spec.Version
		rts[spec.LocalAgent].Refuse["PutMember etcd-2"] = errors.New("data dir is a file")
		err := startMembers(t.Context(), c, rts[spec.LocalAgent], false, map[string]bool{}, nil)
		if err == nil || err.Error() != "configure member etcd-2: data dir is a file" {
			t.Fatalf("startMembers = %v", err)
		}
		wantCalls(t, "this machine's", rts[spec.LocalAgent], "PutMember etcd-1 "+v, "Start etcd-1", "PutMember etcd-2 "+v)
		wantCalls(t, "h2's", rts["h2"])
	})
}

// TestRunningMembers: a member running or starting counts as up; one
// stopped, backing off or failed does not; a runtime that does not answer
// reports none.
func TestRunningMembers(t *testing.T) {
	rt := memberrttest.New()
	for name, state := range map[string]string{"a": memberrt.StateRunning, "b": memberrt.StateStarting, "c": memberrt.StateStopped, "d": memberrt.StateBackoff, "e": memberrt.StateFailed} {
		rt.Run(name, "3.6.16", state)
	}
	got := runningMembers(t.Context(), rt)
	if len(got) != 2 || !got["a"] || !got["b"] {
		t.Errorf("running = %v, want a and b", got)
	}
	rt.Refuse["Members"] = fmt.Errorf("agent %w", memberrt.ErrUnreachable)
	if got := runningMembers(t.Context(), rt); len(got) != 0 {
		t.Errorf("unreachable: running = %v, want none", got)
	}
}

// TestWaitPortFree: a free port is free at once; a busy one whose member
// the runtime reports running is the member's own (errMemberStarted); a
// busy one otherwise is its error, once the wait ends.
func TestWaitPortFree(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hp := free.Addr().String()
	_ = free.Close()
	rt := memberrttest.New()
	if err := waitPortFree(t.Context(), rt, "etcd-1", hp); err != nil {
		t.Errorf("free port: %v", err)
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	hp = busy.Addr().String()
	rt.Run("etcd-1", "3.6.16", memberrt.StateStarting)
	if err := waitPortFree(t.Context(), rt, "etcd-1", hp); !errors.Is(err, errMemberStarted) {
		t.Errorf("busy, member starting: %v; want errMemberStarted", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rt.Run("etcd-1", "3.6.16", memberrt.StateStopped)
	for name, rt := range map[string]memberrt.Runtime{"member stopped": rt, "no agent": nil} {
		if err := waitPortFree(ctx, rt, "etcd-1", hp); err == nil || errors.Is(err, errMemberStarted) {
			t.Errorf("busy, %s: %v; want the busy port's error", name, err)
		}
	}
}
