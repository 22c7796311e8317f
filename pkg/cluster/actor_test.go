package cluster

import (
	"testing"

	"github.com/etcd-steward/steward/pkg/spec"
)

// TestAutoRecoveryActor: the process that runs a directory's automatic
// recovery, and so the agent whose metrics export its counts: on one host
// the spec's first agent only; on several hosts the directory that holds
// the admin certificate (the coordinator's), never a host's directory.
func TestAutoRecoveryActor(t *testing.T) {
	one := &Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: []spec.Agent{{Name: "a"}, {Name: "b"}}}}
	if !one.AutoRecoveryActor("a") || one.AutoRecoveryActor("b") {
		t.Errorf("one host: a %v, b %v; want the first agent only", one.AutoRecoveryActor("a"), one.AutoRecoveryActor("b"))
	}
	hosts := []spec.Agent{{Name: "h1", Host: "10.0.0.1"}, {Name: "h2", Host: "10.0.0.2"}}
	// A host's directory: TLS on, no admin certificate in its pki/.
	host := &Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: hosts}}
	if host.AutoRecoveryActor("h1") {
		t.Error("a host's directory acts")
	}
	// The admin's directory (TLS off: the directory's client is the admin).
	coord := &Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: hosts, TLS: spec.TLS{Disabled: true}}}
	if !coord.AutoRecoveryActor("h2") {
		t.Error("the coordinator's directory does not act")
	}
	if (&Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}}).AutoRecoveryActor("a") {
		t.Error("a spec without agents acts")
	}
}
