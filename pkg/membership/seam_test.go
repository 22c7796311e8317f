package membership

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
	"github.com/etcd-steward/steward/pkg/spec"
)

// seamCluster is a cluster of n members whose members run in an
// in-memory runtime: no agent, no etcd.
func seamCluster(t *testing.T, n int) (*cluster.Cluster, *memberrttest.Runtime) {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: n, Version: binaries.EmbeddedVersion(), StewardDir: dir, TLSOff: true, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	rt := memberrttest.New()
	c.Runtimes = func(string) (memberrt.Runtime, error) { return rt, nil }
	return c, rt
}

func wantCalls(t *testing.T, rt *memberrttest.Runtime, want ...string) {
	t.Helper()
	if got := rt.Calls(); !slices.Equal(got, want) {
		t.Errorf("runtime calls:\n got %q\nwant %q", got, want)
	}
}

// TestStartLearner: a replaced member's learner gets its spec config and
// starts; a private one is configured again on a private client URL
// before it starts (and listens there); a refused config starts nothing.
func TestStartLearner(t *testing.T) {
	c, rt := seamCluster(t, 3)
	m := c.Spec.Members[1]
	v := c.Spec.VersionOf(m)
	u, err := startLearner(t.Context(), c, rt, m, false)
	if err != nil || u != m.ClientURL {
		t.Fatalf("startLearner: %q, %v", u, err)
	}
	wantCalls(t, rt, "PutMember "+m.Name+" "+v, "Start "+m.Name)
	if cfg, _ := rt.Config(m.Name); cfg.ClientURL != m.ClientURL {
		t.Errorf("configured on %s, want %s", cfg.ClientURL, m.ClientURL)
	}

	c, rt = seamCluster(t, 3)
	m = c.Spec.Members[1]
	u, err = startLearner(t.Context(), c, rt, m, true)
	if err != nil || u == m.ClientURL {
		t.Fatalf("private startLearner: %q, %v", u, err)
	}
	wantCalls(t, rt, "PutMember "+m.Name+" "+v, "PutMember "+m.Name+" "+v, "Start "+m.Name)
	if cfg, _ := rt.Config(m.Name); cfg.ClientURL != u {
		t.Errorf("configured on %s, want the private %s", cfg.ClientURL, u)
	}

	c, rt = seamCluster(t, 3)
	refused := errors.New("no room")
	rt.Refuse["PutMember"] = refused
	if _, err := startLearner(t.Context(), c, rt, m, false); !errors.Is(err, refused) || !strings.Contains(err.Error(), "configure member "+m.Name) {
		t.Fatalf("refused config: %v", err)
	}
	wantCalls(t, rt, "PutMember "+m.Name+" "+v)
}

// TestServeClients: a promoted learner is stopped, given its real config
// and started; a refused stop changes nothing else.
func TestServeClients(t *testing.T) {
	c, rt := seamCluster(t, 3)
	m := c.Spec.Members[2]
	v := c.Spec.VersionOf(m)
	rt.Run(m.Name, v, memberrt.StateRunning)
	if err := serveClients(t.Context(), c, rt, m); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rt, "Stop "+m.Name, "PutMember "+m.Name+" "+v, "Start "+m.Name)
	if cfg, _ := rt.Config(m.Name); cfg.ClientURL != m.ClientURL {
		t.Errorf("configured on %s, want %s", cfg.ClientURL, m.ClientURL)
	}

	c, rt = seamCluster(t, 3)
	rt.Run(m.Name, v, memberrt.StateRunning)
	refused := errors.New("stop refused")
	rt.Refuse["Stop"] = refused
	if err := serveClients(t.Context(), c, rt, m); !errors.Is(err, refused) || !strings.Contains(err.Error(), "private client URL") {
		t.Fatalf("refused stop: %v", err)
	}
	wantCalls(t, rt, "Stop "+m.Name)
}

// TestPromoteFailsFast: a learner its runtime reports failed to start
// fails the replace at once, with the runtime's reason, before etcd is
// asked to promote it (no etcd client here).
func TestPromoteFailsFast(t *testing.T) {
	for _, state := range []string{memberrt.StateFailed, memberrt.StateCrashLoop} {
		c, rt := seamCluster(t, 3)
		m := c.Spec.Members[0]
		rt.Run(m.Name, c.Spec.VersionOf(m), state)
		err := promoteWhenReady(t.Context(), c, nil, m.Name, m.ClientURL, 1, time.Minute)
		if err == nil || !strings.Contains(err.Error(), "member "+m.Name+" is "+state) {
			t.Errorf("%s: %v", state, err)
		}
	}
}

// TestStartStop: Start gives the runtime the spec config, then starts;
// a forced Stop asks nothing of etcd and passes the runtime's not-found
// on (recovery tolerates it: memberrt.IsNotFound).
func TestStartStop(t *testing.T) {
	c, rt := seamCluster(t, 3)
	m := c.Spec.Members[0]
	v := c.Spec.VersionOf(m)
	if err := Start(t.Context(), c, m.Name); err != nil {
		t.Fatal(err)
	}
	if err := Stop(t.Context(), c, m.Name, true); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, rt, "PutMember "+m.Name+" "+v, "Start "+m.Name, "Stop "+m.Name)
	if err := Stop(t.Context(), c, c.Spec.Members[1].Name, true); !memberrt.IsNotFound(err) {
		t.Errorf("stop of a member the runtime does not run: %v, want not found", err)
	}

	c, rt = seamCluster(t, 3)
	refused := errors.New("no room")
	rt.Refuse["PutMember"] = refused
	if err := Start(t.Context(), c, m.Name); !errors.Is(err, refused) {
		t.Fatalf("refused config: %v", err)
	}
	wantCalls(t, rt, "PutMember "+m.Name+" "+v)
}
