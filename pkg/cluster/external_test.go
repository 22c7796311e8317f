package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/spec"
)

// TestExternal: on an attached cluster, work on member processes is a
// refusal of kind ErrExternal (asked for, an agent of no member, member
// certificates), and clients and env use the operator's own files.
func TestExternal(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{Dir: dir, Spec: &spec.Cluster{
		Name:     "kube",
		External: &spec.External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/c.crt", KeyFile: "/etc/etcd/c.key", ClusterID: "feed"},
		Members:  []spec.Member{{Name: "cp-1", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380"}},
	}}
	for what, err := range map[string]error{
		"RequireProcessControl": c.RequireProcessControl("upgrade"),
		"EnsureCerts":           c.EnsureCerts(),
	} {
		var r *Refusal
		if !errors.As(err, &r) || !errors.Is(err, ErrExternal) || !strings.Contains(err.Error(), "cluster kube is attached") {
			t.Errorf("%s: got %v, want a refusal of kind ErrExternal", what, err)
		}
	}
	if _, err := c.AgentFor(c.Spec.Members[0]); !errors.Is(err, ErrExternal) {
		t.Errorf("the agent of an attached member: %v", err)
	}
	env := c.Env()
	for _, w := range []string{"ETCDCTL_CACERT=/etc/etcd/ca.crt", "ETCDCTL_CERT=/etc/etcd/c.crt", "ETCDCTL_KEY=/etc/etcd/c.key"} {
		if !strings.Contains(env, w) {
			t.Errorf("env lacks %s:\n%s", w, env)
		}
	}
	if !c.Admin() || c.onJoinedHost() {
		t.Errorf("an attached cluster's directory is its admin's: Admin %v, onJoinedHost %v", c.Admin(), c.onJoinedHost())
	}

	c.Spec.External = nil
	if err := c.RequireProcessControl("upgrade"); err != nil {
		t.Errorf("a cluster Steward runs: %v", err)
	}
}
