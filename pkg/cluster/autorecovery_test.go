package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestAutoRecoveryCannot: a host whose agent predates automatic recovery
// across hosts (no capability), or does not answer, is named with its
// address and what to do; a current agent passes.
func TestAutoRecoveryCannot(t *testing.T) {
	a := spec.Agent{Name: "cp-2", Host: "10.0.0.12"}
	if msg := autoRecoveryCannot(a, agentapi.AgentInfo{Capabilities: []string{agentapi.CapRecoveryCoordinated}}, nil); msg != "" {
		t.Errorf("a current agent refused: %s", msg)
	}
	msg := autoRecoveryCannot(a, agentapi.AgentInfo{Name: "cp-2"}, nil)
	for _, want := range []string{"host cp-2 (10.0.0.12)", "older than automatic recovery across hosts", "upgrade Steward on that host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("old agent: %q lacks %q", msg, want)
		}
	}
	msg = autoRecoveryCannot(a, agentapi.AgentInfo{}, errors.New("connection refused"))
	if !strings.Contains(msg, "host cp-2 (10.0.0.12)") || !strings.Contains(msg, "connection refused") {
		t.Errorf("unreachable agent: %q", msg)
	}
}

// TestAgentsToAsk: only a change that turns recovery.mode to auto asks
// every host's agent; with auto already on, only agents the change adds
// (or moves) are asked, so a spec save while a host is down (a recover, a
// member replace) is not refused for that host.
func TestAgentsToAsk(t *testing.T) {
	mk := func(mode string, agents ...spec.Agent) *spec.Cluster {
		s := &spec.Cluster{Agents: agents}
		s.Recovery.Mode = mode
		return s
	}
	a1 := spec.Agent{Name: "cp-1", Host: "10.0.0.1", Port: 2381}
	a2 := spec.Agent{Name: "cp-2", Host: "10.0.0.2", Port: 2381}
	a3 := spec.Agent{Name: "cp-3", Host: "10.0.0.3", Port: 2381}
	names := func(as []spec.Agent) string {
		var n []string
		for _, a := range as {
			n = append(n, a.Name)
		}
		return strings.Join(n, ",")
	}
	moved := a2
	moved.Host = "10.0.0.9"
	for _, tc := range []struct {
		name      string
		prev, cur *spec.Cluster
		want      string
	}{
		{"new cluster, auto", nil, mk("auto", a1, a2), "cp-1,cp-2"},
		{"manual", mk("manual", a1, a2), mk("manual", a1, a2), ""},
		{"turned to auto", mk("manual", a1, a2), mk("auto", a1, a2), "cp-1,cp-2"},
		{"auto kept, same agents", mk("auto", a1, a2), mk("auto", a1, a2), ""},
		{"auto kept, agent added", mk("auto", a1, a2), mk("auto", a1, a2, a3), "cp-3"},
		{"auto kept, agent moved", mk("auto", a1, a2), mk("auto", a1, moved), "cp-2"},
	} {
		if got := names(agentsToAsk(tc.prev, tc.cur)); got != tc.want {
			t.Errorf("%s: asked %q, want %q", tc.name, got, tc.want)
		}
	}
}
