// Package clustertest holds cluster handles for the unit tests of the
// packages above pkg/cluster (no process runs: the handle's spec and
// directory only). Tests alone import it.
package clustertest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// MultiHost is a coordinator's cluster in a temporary directory: members
// etcd-h1..etcd-h3 on hosts h1..h3 (10.0.0.11..13), plus etcd-local on
// this machine's agent when local; the certificate directory made, with a
// CA key file in it when caKey (the coordinator's machine).
func MultiHost(t testing.TB, local, caKey bool) *cluster.Cluster {
	t.Helper()
	s := &spec.Cluster{Agents: []spec.Agent{{Name: spec.LocalAgent, Address: "unix:///run/agent.sock"}}}
	for _, h := range []string{"h1", "h2", "h3"} {
		s.Agents = append(s.Agents, spec.Agent{Name: h, Host: "10.0.0.1" + h[1:], Port: 2378})
		s.Members = append(s.Members, spec.Member{Name: "etcd-" + h, Agent: h})
	}
	if local {
		s.Members = append(s.Members, spec.Member{Name: "etcd-local", Agent: spec.LocalAgent})
	}
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: s}
	if err := os.MkdirAll(c.CertDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if caKey {
		if err := os.WriteFile(filepath.Join(c.CertDir(), pki.CAKey), []byte("key"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
