package certs

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestRoundRenewsHosts: on the coordinator's machine (its directory holds
// the CA key) a round also renews a joined host's due leaves through the
// host's real agent API over mutual TLS: every leaf of the host gets a new
// serial with its key unchanged, the agent serves its new certificate, and
// no previous certificate is left on the host once it is served.
func TestRoundRenewsHosts(t *testing.T) {
	dir, hostRoot := t.TempDir(), t.TempDir()
	hostDir := filepath.Join(hostRoot, "pki")
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.TLS.LeafValidity, s.TLS.RenewBefore = "30s", "29s"
	certDir := s.CertDir(dir)
	v := pki.Validity{Leaf: 30 * time.Second, RenewBefore: 29 * time.Second}
	if err := pki.EnsureWith(certDir, s.Name, nil, v); err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueHost(certDir, s.Name, "cp-2", "127.0.0.1", v)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteHost(hostDir, b); err != nil {
		t.Fatal(err)
	}
	// The host's agent, serving its API as a joined agent does.
	a := agent.New(agent.Options{Dir: hostRoot, CertDir: hostDir, Log: slog.New(slog.DiscardHandler)})
	tc, err := pki.AgentServerTLS(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.Backup.Continuous = false // no store the host reaches: not what this test is about
	s.Agents = append(s.Agents, spec.Agent{Name: "cp-2", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port})
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}

	before := map[string]string{}
	keys := map[string][]byte{}
	for _, n := range pki.HostLeafNames {
		before[n] = serialOf(t, filepath.Join(hostDir, n+".crt"))
		keys[n], _ = os.ReadFile(filepath.Join(hostDir, n+".key"))
	}
	log := slog.New(slog.DiscardHandler)
	renewed := func() bool {
		for _, n := range pki.HostLeafNames {
			if serialOf(t, filepath.Join(hostDir, n+".crt")) == before[n] {
				return false
			}
		}
		return true
	}
	// Due one second after issuance (30s lifetime, 29s margin, 3s backdated).
	deadline := time.Now().Add(10 * time.Second)
	for !renewed() {
		if time.Now().After(deadline) {
			t.Fatal("the host's certificates were not renewed within 10s of their renewal point")
		}
		if _, _, err := round(t.Context(), dir, log); err != nil {
			t.Fatal(err)
		}
		if !renewed() {
			time.Sleep(200 * time.Millisecond) // until the renewal point: nothing to poll
		}
	}
	for _, n := range pki.HostLeafNames {
		if k, _ := os.ReadFile(filepath.Join(hostDir, n+".key")); string(k) != string(keys[n]) {
			t.Errorf("%s.key changed", n)
		}
		if _, err := os.Stat(filepath.Join(hostDir, n+".crt"+pki.PrevSuffix)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: previous certificate left: %v", n, err)
		}
	}
	pool, err := pki.CAPool(filepath.Join(hostDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ServedCert(t.Context(), ln.Addr().String(), pool, nil)
	if c == nil || c.SerialNumber.String() != serialOf(t, filepath.Join(hostDir, "agent.crt")) {
		t.Errorf("the agent serves %v (%v), not its renewed certificate", c, err)
	}
}
