package kubeupgrade

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

// serveAgent runs an agent's API on a Unix socket and returns its
// address (unix://PATH).
func serveAgent(t *testing.T, o agent.Options) string {
	t.Helper()
	o.Log = slog.New(slog.DiscardHandler)
	a := agent.New(o)
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "unix://" + sock
}

// TestCheckAgents: apply refuses, before anything is recorded, a host
// whose agent was not given its manifests directory, and a host with no
// agent in the spec, each naming the host; an agent with the directory
// passes.
func TestCheckAgents(t *testing.T) {
	with := serveAgent(t, agent.Options{Dir: t.TempDir(), KubeManifests: t.TempDir()})
	without := serveAgent(t, agent.Options{Dir: t.TempDir()})
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: []spec.Agent{
		{Name: "node-a", Address: with}, {Name: "node-c", Address: with}, {Name: "node-b", Address: without},
	}}}
	comps := func(hosts ...string) []PlannedComponent {
		var out []PlannedComponent
		for _, h := range hosts {
			out = append(out, PlannedComponent{Host: h, Component: "kube-apiserver"})
		}
		return out
	}
	if err := checkAgents(t.Context(), c, comps("node-a", "node-c")); err != nil {
		t.Errorf("agents with the directory: %v", err)
	}
	err := checkAgents(t.Context(), c, comps("node-a", "node-b"))
	if !errors.Is(err, ErrNoManifestsDir) || !strings.Contains(err.Error(), "host node-b: its Steward agent node-b does not know the host's static pod manifests directory") {
		t.Errorf("an agent without the directory: %v", err)
	}
	err = checkAgents(t.Context(), c, comps("node-x"))
	if !errors.Is(err, ErrNoManifestsDir) || !strings.Contains(err.Error(), "host node-x: no Steward agent") {
		t.Errorf("a host with no agent: %v", err)
	}
}
