package cluster

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestRequireCapability: the agents on other hosts are asked, over their
// mutual-TLS API, what they can do; a host whose agent does not report the
// capability (an agent of an older steward answers without the field) is
// refused by name with ErrAgentTooOld, a host whose agent does is not
// named, and the agent on this machine is not asked.
func TestRequireCapability(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	certDir := s.CertDir(dir)
	v := pki.Validity{Leaf: time.Hour, RenewBefore: time.Minute}
	if err := pki.EnsureWith(certDir, s.Name, nil, v); err != nil {
		t.Fatal(err)
	}
	// An agent's GET /v1/agent on host name, served as a joined agent
	// serves its API, reporting caps.
	serve := func(name string, caps []string) int {
		hostDir := filepath.Join(t.TempDir(), "pki")
		b, err := pki.IssueHost(certDir, s.Name, name, "127.0.0.1", v)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteHost(hostDir, b); err != nil {
			t.Fatal(err)
		}
		tc, err := pki.AgentServerTLS(hostDir)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(agentapi.AgentInfo{Name: name, Capabilities: caps})
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	s.Agents = append(s.Agents,
		spec.Agent{Name: "h-new", Host: "127.0.0.1", Port: serve("h-new", []string{agentapi.CapRebuildDataDirs})},
		spec.Agent{Name: "h-old", Host: "127.0.0.1", Port: serve("h-old", nil)})
	local := s.Members[0].Agent
	s.Members[1].Agent, s.Members[2].Agent = "h-new", "h-old"
	c := &Cluster{Dir: dir, Spec: s}

	err = c.RequireCapability(t.Context(), "the restore strategy", CapRebuildDataDirs, s.Members...)
	if !errors.Is(err, ErrAgentTooOld) {
		t.Fatalf("RequireCapability = %v, want ErrAgentTooOld", err)
	}
	msg := err.Error()
	for _, want := range []string{"the restore strategy", "host h-old (member " + s.Members[2].Name + ")", "nothing was changed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "h-new") || strings.Contains(msg, local) || strings.Contains(msg, "--") {
		t.Errorf("refusal %q names a host that can, this machine's agent, or a flag", msg)
	}
	if err := c.RequireCapability(t.Context(), "the restore strategy", CapRebuildDataDirs, s.Members[:2]...); err != nil {
		t.Errorf("members on this machine and on a host whose agent can: %v", err)
	}
}
