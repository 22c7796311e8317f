package status

import (
	"github.com/etcd-steward/steward/pkg/cluster"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// multiHostCluster is a coordinator's cluster: members on hosts h1..h3
// (plus one on this machine's agent when local), the CA key in its
// certificate directory when caKey.
func multiHostCluster(t *testing.T, local, caKey bool) *cluster.Cluster {
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

// TestNeedsRenewer: only the coordinator of a multi-host cluster (the CA
// key here, TLS on) with no member on this machine's agent needs a
// renewal process of its own.
func TestNeedsRenewer(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		local, caKey, tlsOff bool
		singleHost           bool
		want                 bool
	}{
		{name: "coordinator without a local agent", caKey: true, want: true},
		{name: "coordinator with a local member (its agent's loop renews)", local: true, caKey: true},
		{name: "no CA key (a joined host's directory)"},
		{name: "TLS off", caKey: true, tlsOff: true},
		{name: "single host", caKey: true, singleHost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := multiHostCluster(t, tc.local, tc.caKey)
			c.Spec.TLS.Disabled = tc.tlsOff
			if tc.singleHost {
				c.Spec.Agents = c.Spec.Agents[:1]
			}
			if got := NeedsRenewer(c); got != tc.want {
				t.Errorf("NeedsRenewer() = %v, want %v", got, tc.want)
			}
		})
	}
}
