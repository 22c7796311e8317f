package carotate

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestFileStepsOnAJoinedHost: the file steps of a rotation (prepare,
// trust both, reissue, clients, drop) on a coordinator with a joined host
// whose real agent serves its API over mutual TLS: the host ends trusting
// the new CA alone, each of its leaves reissued by the new CA with its key
// kept, served without the cross-signed CA once the last step retired it
// (the old CA alone no longer verifies the agent), no previous certificate
// left, and its agent serving the new one; each step run again changes nothing on
// the host (but for a previous certificate a crash left, dropped). With the host's agent gone, a step that needs it fails naming
// the host.
func TestFileStepsOnAJoinedHost(t *testing.T) {
	c, certDir, hostDir, ln, srv := joinedHost(t)
	oldCA, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]byte{}
	for _, n := range pki.HostLeafNames {
		keys[n], _ = os.ReadFile(filepath.Join(hostDir, n+".key"))
	}
	p, err := NewPlan(c, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{C: c, HealthTimeout: 20 * time.Second}
	snapshot := func() map[string]string {
		out := map[string]string{}
		ents, _ := os.ReadDir(hostDir)
		for _, d := range ents {
			b, _ := os.ReadFile(filepath.Join(hostDir, d.Name()))
			out[d.Name()] = string(b)
		}
		return out
	}
	for i := range p.Steps {
		st := &p.Steps[i]
		if st.Kind == StepRestart {
			continue // no member runs here: the e2e test restarts them
		}
		if err := e.Execute(t.Context(), p, st); err != nil {
			t.Fatalf("step %d %s: %v", i, st.Kind, err)
		}
		before := snapshot()
		if err := e.Execute(t.Context(), p, st); err != nil {
			t.Fatalf("step %d %s again: %v", i, st.Kind, err)
		}
		if after := snapshot(); len(after) != len(before) {
			t.Errorf("step %d %s again changed the host's files", i, st.Kind)
		} else {
			for k, v := range before {
				if after[k] != v {
					t.Errorf("step %d %s again changed the host's %s", i, st.Kind, k)
				}
			}
		}
		if st.Kind == StepReissue {
			// A crash between a push and the drop of the previous copy:
			// the re-run drops it once the leaf is served.
			prev := filepath.Join(hostDir, "server.crt"+pki.PrevSuffix)
			if err := os.WriteFile(prev, []byte(before["server.crt"]), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := e.Execute(t.Context(), p, st); err != nil {
				t.Fatalf("step %d %s with a previous copy left: %v", i, st.Kind, err)
			}
			if _, err := os.Stat(prev); err == nil {
				t.Errorf("step %d %s run again left the host's %s", i, st.Kind, filepath.Base(prev))
			}
		}
		if st.Kind == StepTrust {
			// A forced renewal of the hosts by the old CA would undo the
			// rotation's work: refused while it runs, nothing pushed.
			if _, err := certs.RenewHosts(t.Context(), c, nil, true, time.Second); !errors.Is(err, pki.ErrRotationInProgress) {
				t.Errorf("RenewHosts during the rotation: %v, want pki.ErrRotationInProgress", err)
			}
			if after := snapshot(); after["server.crt"] != before["server.crt"] {
				t.Error("RenewHosts during the rotation replaced the host's server certificate")
			}
			hb, _ := os.ReadFile(filepath.Join(hostDir, pki.CACert))
			if cb, _ := os.ReadFile(filepath.Join(certDir, pki.CACert)); !bytes.Equal(hb, cb) || bytes.Count(hb, []byte("BEGIN CERTIFICATE")) != 2 {
				t.Errorf("after %s the host's ca.crt is not the coordinator's bundle of both CAs", st.Kind)
			}
		}
	}
	newCAPEM, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if hb, _ := os.ReadFile(filepath.Join(hostDir, pki.CACert)); !bytes.Equal(hb, newCAPEM) || bytes.Equal(hb, oldCA) {
		t.Fatalf("the host's ca.crt is not the new CA alone")
	}
	newCA, err := pki.ParseCertPEM(newCAPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range pki.HostLeafNames {
		fb, _ := os.ReadFile(filepath.Join(hostDir, n+".crt"))
		leaf, chain, err := pki.ParseLeafChainPEM(fb)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.CheckSignatureFrom(newCA) != nil || len(chain) != 0 {
			t.Errorf("host %s: issuer %q, %d CA certificates after it; want the new CA's alone (the cross-signed CA retired)", n, leaf.Issuer.CommonName, len(chain))
		}
		if k, _ := os.ReadFile(filepath.Join(hostDir, n+".key")); !bytes.Equal(k, keys[n]) {
			t.Errorf("host %s.key changed", n)
		}
		if _, err := os.Stat(filepath.Join(hostDir, n+".crt"+pki.PrevSuffix)); err == nil {
			t.Errorf("host %s: previous certificate left", n)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(newCA)
	if got, err := pki.ServedCert(t.Context(), ln.Addr().String(), pool, nil); err != nil || got.CheckSignatureFrom(newCA) != nil {
		t.Errorf("the host's agent serves %v (%v), not a certificate of the new CA", got, err)
	}
	// The old CA alone no longer verifies what the agent serves: the
	// cross-signed CA is not served after its leaf any more.
	oldCert, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}
	oldPool := x509.NewCertPool()
	oldPool.AddCert(oldCert)
	if got, err := pki.ServedCert(t.Context(), ln.Addr().String(), oldPool, nil); got == nil || err == nil {
		t.Errorf("the host's agent serves %v verified by the old CA alone (%v) after the rotation", got, err)
	}

	// A second rotation with the host's agent gone: the steps that reach
	// it fail naming it.
	_ = srv.Close()
	if err := e.Execute(t.Context(), p, &plan.Step{Kind: StepPrepare}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{StepTrust, StepReissue} {
		err := e.Execute(t.Context(), p, &plan.Step{Kind: kind})
		t.Logf("%s with the host's agent gone: %v", kind, err)
		if err == nil || !strings.Contains(err.Error(), "host cp-2") {
			t.Errorf("%s with the host's agent gone: %v, want an error naming host cp-2", kind, err)
		}
	}
}

// joinedHost makes a coordinator's directory (one local member, TLS) with
// a joined host cp-2 whose real agent serves its API over mutual TLS from
// hostDir, stopped at cleanup.
func joinedHost(t *testing.T) (c *cluster.Cluster, certDir, hostDir string, ln net.Listener, srv *http.Server) {
	t.Helper()
	dir, hostRoot := t.TempDir(), t.TempDir()
	hostDir = filepath.Join(hostRoot, "pki")
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	certDir = s.CertDir(dir)
	if err := pki.EnsureWith(certDir, s.Name, nil, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueHost(certDir, s.Name, "cp-2", "127.0.0.1", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteHost(hostDir, b); err != nil {
		t.Fatal(err)
	}
	a := agent.New(agent.Options{Dir: hostRoot, CertDir: hostDir, Log: slog.New(slog.DiscardHandler)})
	tc, err := pki.AgentServerTLS(hostDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err = tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	srv = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.Backup.Continuous = false
	s.Agents = append(s.Agents, spec.Agent{Name: "cp-2", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port})
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	c, err = cluster.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, certDir, hostDir, ln, srv
}
