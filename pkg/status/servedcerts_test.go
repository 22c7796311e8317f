package status

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestServedCertsHostLeavesAgentsAlone: a joined host's directory (its
// client certificate is steward-host:NAME, which agents refuse) does not
// handshake with the agents' API to read the certificate they serve: every
// status of a member pod's loops (the backup loop's, every 2 s) made each
// agent log "client certificate steward-host:db-N may not use the agent
// API". The coordinator (the admin certificate) still reads it.
func TestServedCertsHostLeavesAgentsAlone(t *testing.T) {
	coord, h1, h2 := t.TempDir(), t.TempDir(), t.TempDir()
	certDir := filepath.Join(coord, "pki")
	v := pki.Validity{Leaf: time.Hour, RenewBefore: time.Minute}
	if err := pki.EnsureWith(certDir, "c", nil, v); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"h1": h1, "h2": h2} {
		b, err := pki.IssueHost(certDir, "c", name, "127.0.0.1", v)
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteHost(filepath.Join(dir, "pki"), b); err != nil {
			t.Fatal(err)
		}
	}
	// Agent h1's API: every handshake it sees, and how it ended.
	tc, err := pki.AgentServerTLS(filepath.Join(h1, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	var seen []string // guarded by mu
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				s := tls.Server(conn, tc)
				res := "ok"
				if err := s.Handshake(); err != nil {
					res = err.Error()
				} else if _, err := s.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "may not use") {
					res = err.Error() // TLS 1.3: the refusal comes after the client's handshake
				}
				mu.Lock()
				seen = append(seen, res)
				mu.Unlock()
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s := &spec.Cluster{Name: "c", Agents: []spec.Agent{{Name: "h1", Host: "127.0.0.1", Port: port}, {Name: "h2", Host: "127.0.0.1", Port: port + 1}}}

	host := &cluster.Cluster{Dir: h2, Spec: s}
	if host.Admin() {
		t.Fatal("the host's directory is the admin's")
	}
	for _, ci := range ServedCerts(t.Context(), host, "") {
		if strings.HasPrefix(ci.Name, "agent ") {
			t.Errorf("the host lists %s: %+v", ci.Name, ci)
		}
	}
	// The coordinator still reads agent h1's certificate; its handshake
	// comes after any of the host's (accepted in order).
	admin := &cluster.Cluster{Dir: coord, Spec: s}
	var got *pki.CertInfo
	for _, ci := range ServedCerts(t.Context(), admin, "") {
		if ci.Name == "agent h1" {
			got = &ci
		}
	}
	if got == nil || got.Error != "" || got.Serial == "" {
		t.Fatalf("the coordinator's agent h1: %+v", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n, all := len(seen), strings.Join(seen, "; ")
		mu.Unlock()
		if n > 0 && strings.HasSuffix(all, "ok") {
			if n != 1 {
				t.Errorf("agent h1 saw %d handshakes (%s), want the coordinator's alone", n, all)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent h1 saw %q, never the coordinator's handshake", all)
		}
		time.Sleep(20 * time.Millisecond) // poll
	}
}
