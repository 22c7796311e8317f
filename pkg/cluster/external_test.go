package cluster

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/refusal"
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
		var r *refusal.Refusal
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

	// Its certificates are the operator's, even once every member is
	// adopted (adoption keeps each member's own files).
	for _, adopted := range []bool{false, true} {
		if adopted {
			c.Spec.Members[0].Agent, c.Spec.Members[0].Adopted = "local", &spec.Adopted{}
		}
		var r *refusal.Refusal
		if err := c.RequireOwnCerts("renew"); !errors.As(err, &r) || !errors.Is(err, ErrOperatorCerts) || !strings.Contains(err.Error(), "are the operator's") {
			t.Errorf("adopted %v: RequireOwnCerts = %v, want a refusal of kind ErrOperatorCerts", adopted, err)
		}
	}
	c.Spec.Members[0].Agent, c.Spec.Members[0].Adopted = "", nil

	c.Spec.External = nil
	if err := c.RequireProcessControl("upgrade"); err != nil {
		t.Errorf("a cluster Steward runs: %v", err)
	}
	if err := c.RequireOwnCerts("renew"); err != nil {
		t.Errorf("a cluster Steward runs: %v", err)
	}
}

// TestAdoptedMember: an adopted member runs with the configuration it had
// (its own certificate files, token, settings; the operator's client
// certificate for the agent's health checks), and process control is
// refused until every member is adopted.
func TestAdoptedMember(t *testing.T) {
	dir := t.TempDir()
	adopted := &spec.Adopted{
		InitialCluster: "cp-1=https://127.0.0.1:2380", InitialClusterToken: "theirs", SnapshotCount: 5000,
		TLS:        &spec.AdoptedTLS{CA: "/pki/ca.pem", ServerCert: "/pki/s.pem", ServerKey: "/pki/s-key.pem", PeerCert: "/pki/p.pem", PeerKey: "/pki/p-key.pem"},
		ExtraFlags: map[string]string{"max-txn-ops": "256"},
	}
	c := &Cluster{Dir: dir, Spec: &spec.Cluster{
		Name: "kube", Token: "attached-feed", Version: "3.5.35",
		External: &spec.External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/c.crt", KeyFile: "/etc/etcd/c.key", ClusterID: "feed"},
		Agents:   []spec.Agent{{Name: spec.LocalAgent, Address: "unix://" + dir + "/agent.sock"}},
		Members: []spec.Member{
			{Name: "cp-1", Agent: spec.LocalAgent, DataDir: "/var/lib/etcd", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380", Adopted: adopted},
			{Name: "cp-2", ClientURL: "https://127.0.0.2:2379", PeerURL: "https://127.0.0.2:2380"},
		},
	}}
	cfg := c.MemberConfig(c.Spec.Members[0])
	switch {
	case cfg.DataDir != "/var/lib/etcd", cfg.InitialClusterToken != "theirs", cfg.InitialClusterState != "existing",
		cfg.InitialCluster != adopted.InitialCluster, cfg.SnapshotCount != 5000, cfg.ExtraFlags["max-txn-ops"] != "256",
		cfg.Version != "3.5.35", cfg.BinaryStore != dir+"/binaries":
		t.Errorf("config of the adopted member: %+v", cfg)
	case cfg.TLS == nil || cfg.TLS.CA != "/pki/ca.pem" || cfg.TLS.ServerCert != "/pki/s.pem" || cfg.TLS.PeerKey != "/pki/p-key.pem" ||
		cfg.TLS.ClientCert != "/etc/etcd/c.crt" || cfg.TLS.ClientKey != "/etc/etcd/c.key":
		t.Errorf("TLS files of the adopted member: %+v", cfg.TLS)
	}
	// Re-added with an empty data dir (member replace, recovery's
	// reseed): it joins the membership it was added to, not the one it
	// was first started with.
	readded := c.Spec.Members[0]
	readded.Bootstrap = &spec.Bootstrap{InitialCluster: "cp-2=https://127.0.0.2:2380,cp-1=https://127.0.0.1:2380"}
	if cfg := c.MemberConfig(readded); cfg.InitialCluster != readded.Bootstrap.InitialCluster || cfg.InitialClusterState != "existing" || cfg.InitialClusterToken != "theirs" {
		t.Errorf("config of the re-added adopted member: initial cluster %q (%s, token %q), want %q (existing, theirs)", cfg.InitialCluster, cfg.InitialClusterState, cfg.InitialClusterToken, readded.Bootstrap.InitialCluster)
	}
	if err := c.RequireProcessControl("upgrade"); !errors.Is(err, ErrExternal) {
		t.Errorf("one member of two adopted: %v, want a refusal of kind ErrExternal", err)
	}
	c.Spec.Members = c.Spec.Members[:1]
	if err := c.RequireProcessControl("upgrade"); err != nil {
		t.Errorf("every member adopted: %v", err)
	}
}

// TestTakenOver: a fully adopted cluster with the operator's certificates
// issues nothing (EnsureCerts makes no CA of Steward's, which no member
// would trust); once Steward took over issuing (the external block's files
// empty), certificate commands are let through, clients dial with the
// certificate directory's files and every adopted member runs with them.
func TestTakenOver(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{Dir: dir, Spec: &spec.Cluster{
		Name: "kube", Token: "attached-feed", Version: "3.5.35",
		External: &spec.External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/c.crt", KeyFile: "/etc/etcd/c.key", ClusterID: "feed"},
		Agents:   []spec.Agent{{Name: spec.LocalAgent, Address: "unix://" + dir + "/agent.sock"}},
		Members: []spec.Member{{Name: "cp-1", Agent: spec.LocalAgent, DataDir: "/var/lib/etcd", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380",
			Adopted: &spec.Adopted{InitialClusterToken: "theirs", TLS: &spec.AdoptedTLS{CA: "/pki/ca.pem", ServerCert: "/pki/s.pem", ServerKey: "/pki/s-key.pem", PeerCert: "/pki/p.pem", PeerKey: "/pki/p-key.pem"}}}},
	}}
	if err := c.EnsureCerts(); err != nil {
		t.Fatalf("EnsureCerts on a fully adopted cluster with the operator's certificates: %v", err)
	}
	if ents, _ := os.ReadDir(c.CertDir()); len(ents) > 0 {
		t.Errorf("EnsureCerts wrote %d files into %s; want none", len(ents), c.CertDir())
	}
	if err := c.RequireOwnCerts("renew"); !errors.Is(err, ErrOperatorCertsAdopted) {
		t.Errorf("fully adopted, the operator's certificates: %v; want a refusal of kind ErrOperatorCertsAdopted (the command names the take-over)", err)
	}

	c.Spec.External.CAFile, c.Spec.External.CertFile, c.Spec.External.KeyFile = "", "", ""
	c.Spec.Members[0].Adopted.TLS = nil
	if err := c.RequireOwnCerts("renew"); err != nil {
		t.Errorf("taken over: RequireOwnCerts = %v", err)
	}
	f := pki.FilesIn(c.CertDir())
	if ca, cert, key := c.clientFiles(); ca != f.CA || cert != f.ClientCert || key != f.ClientKey {
		t.Errorf("taken over: client files %s %s %s, want the certificate directory's", ca, cert, key)
	}
	cfg := c.MemberConfig(c.Spec.Members[0])
	want := agentapi.TLSFiles{CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey, PeerCert: f.PeerCert, PeerKey: f.PeerKey, ClientCert: f.ClientCert, ClientKey: f.ClientKey}
	if cfg.TLS == nil || *cfg.TLS != want || cfg.InitialClusterToken != "theirs" || cfg.DataDir != "/var/lib/etcd" {
		t.Errorf("taken over: the adopted member's config %+v, TLS %+v; want its own settings and the certificate directory's files", cfg, cfg.TLS)
	}
	if c.Spec.OperatorCerts() {
		t.Error("taken over: the certificates still count as the operator's (status would not count them as Steward's to renew)")
	}
}
