package agent

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/pki"
)

func baseConfig() agentapi.MemberConfig {
	return agentapi.MemberConfig{
		Name: "etcd-1", Version: "3.6.16", DataDir: "/d/etcd-1",
		ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380",
		InitialCluster: "etcd-1=https://127.0.0.1:2380", InitialClusterState: "new", InitialClusterToken: "tok",
		QuotaBackendBytes: 1 << 30, AutoCompactionMode: "periodic", AutoCompactionRetention: "1h",
		SnapshotCount: 5000, HeartbeatIntervalMs: 100, ElectionTimeoutMs: 1000,
		TLS: &agentapi.TLSFiles{CA: "/p/ca.crt", ServerCert: "/p/server.crt", ServerKey: "/p/server.key",
			PeerCert: "/p/peer.crt", PeerKey: "/p/peer.key", ClientCert: "/p/client.crt", ClientKey: "/p/client.key"},
		ExtraFlags: map[string]string{"max-txn-ops": "256", "--log-level": "warn"},
	}
}

// withCerts points a config's TLS files at certificates pkg/pki issued for
// a cluster named "prod".
func withCerts(t *testing.T, c agentapi.MemberConfig) agentapi.MemberConfig {
	t.Helper()
	dir := t.TempDir()
	if err := pki.Ensure(dir, "prod", nil); err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(dir)
	c.TLS = &agentapi.TLSFiles{CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey,
		PeerCert: f.PeerCert, PeerKey: f.PeerKey, ClientCert: f.ClientCert, ClientKey: f.ClientKey}
	return c
}

func TestEtcdFlags(t *testing.T) {
	cat := catalogue.Default()
	c := withCerts(t, baseConfig())
	f, err := EtcdFlags(c, cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--name=etcd-1", "--data-dir=/d/etcd-1",
		"--listen-client-urls=https://127.0.0.1:2379", "--advertise-client-urls=https://127.0.0.1:2379",
		"--listen-peer-urls=https://127.0.0.1:2380", "--initial-advertise-peer-urls=https://127.0.0.1:2380",
		"--initial-cluster=etcd-1=https://127.0.0.1:2380", "--initial-cluster-state=new", "--initial-cluster-token=tok",
		"--quota-backend-bytes=1073741824", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h",
		"--snapshot-count=5000", "--heartbeat-interval=100", "--election-timeout=1000",
		"--client-cert-auth=true", "--peer-client-cert-auth=true", "--trusted-ca-file=" + c.TLS.CA,
		"--cert-file=" + c.TLS.ServerCert, "--key-file=" + c.TLS.ServerKey, "--peer-cert-file=" + c.TLS.PeerCert,
		// The peer port takes the peer certificate only (pkg/pki's CN
		// for it), not the client or server certificate of the same CA.
		"--peer-cert-allowed-cn=prod-peer",
		"--max-txn-ops=256", "--log-level=warn",
	} {
		if !slices.Contains(f, want) {
			t.Errorf("missing %s in %v", want, f)
		}
	}
	// Extra flags come last, sorted, so the command line is stable.
	if i, j := slices.Index(f, "--log-level=warn"), slices.Index(f, "--max-txn-ops=256"); i > j || i < len(f)-2 {
		t.Errorf("extra flags not last and sorted: %v", f)
	}
	if slices.Contains(f, "--force-new-cluster") {
		t.Errorf("--force-new-cluster without ForceNewCluster: %v", f)
	}
	force := c
	force.ForceNewCluster = true
	if ff, err := EtcdFlags(force, cat); err != nil || !slices.Contains(ff, "--force-new-cluster") {
		t.Errorf("ForceNewCluster: %v %v", ff, err)
	}
	plain := baseConfig()
	plain.TLS = nil
	pf, err := EtcdFlags(plain, cat)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range pf {
		if strings.Contains(a, "cert") {
			t.Errorf("TLS off but flag %s present", a)
		}
	}
}

// TestEtcdFlagsPerVersion: the same extra flag is spelled for the version
// each member runs, and a flag the version removed stops the launch.
func TestEtcdFlagsPerVersion(t *testing.T) {
	cat := catalogue.Default()
	c := withCerts(t, baseConfig())
	c.ExtraFlags = map[string]string{"--experimental-snapshot-catchup-entries": "5000"}
	for v, want := range map[string]string{
		"3.5.35": "--experimental-snapshot-catchup-entries=5000",
		"3.6.16": "--snapshot-catchup-entries=5000",
		"3.7.3":  "--snapshot-catchup-entries=5000",
	} {
		c.Version = v
		f, err := EtcdFlags(c, cat)
		if err != nil || !slices.Contains(f, want) {
			t.Errorf("%s: %v (err %v), want %s", v, f, err, want)
		}
	}
	c.Version = "3.7.3"
	c.ExtraFlags = map[string]string{"enable-v2": "true"}
	if _, err := EtcdFlags(c, cat); err == nil || !strings.Contains(err.Error(), "removed in 3.7") {
		t.Errorf("enable-v2 on 3.7: %v", err)
	}
}

// TestEtcdFlagsPeerCN: the allowed peer CN is read from the peer
// certificate the member runs with, and a member whose peer certificate
// cannot be read does not start without the restriction.
func TestEtcdFlagsPeerCN(t *testing.T) {
	cat := catalogue.Default()
	c := withCerts(t, baseConfig())
	dir := t.TempDir()
	if err := pki.Ensure(dir, "other", nil); err != nil {
		t.Fatal(err)
	}
	c.TLS.PeerCert = pki.FilesIn(dir).PeerCert
	for _, v := range []string{"3.5.35", "3.6.16", "3.7.3"} {
		c.Version = v
		f, err := EtcdFlags(c, cat)
		if err != nil || !slices.Contains(f, "--peer-cert-allowed-cn=other-peer") {
			t.Errorf("%s: %v (err %v), want --peer-cert-allowed-cn=other-peer", v, f, err)
		}
	}
	// An adopted member keeps what it ran with: one name, or none.
	c.TLS.PeerAllowedCN = "node-a"
	if f, err := EtcdFlags(c, cat); err != nil || !slices.Contains(f, "--peer-cert-allowed-cn=node-a") || slices.Contains(f, "--peer-cert-allowed-cn=other-peer") {
		t.Errorf("PeerAllowedCN node-a: %v (err %v), want --peer-cert-allowed-cn=node-a alone", f, err)
	}
	c.TLS.PeerAllowedCN, c.TLS.PeerAnyCN = "", true
	if f, err := EtcdFlags(c, cat); err != nil || slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, "--peer-cert-allowed-cn") }) {
		t.Errorf("PeerAnyCN: %v (err %v), want no --peer-cert-allowed-cn", f, err)
	}
	c.TLS.PeerAnyCN = false
	c.TLS.PeerCert = filepath.Join(dir, "missing.crt")
	if f, err := EtcdFlags(c, cat); err == nil || !strings.Contains(err.Error(), "peer certificate") {
		t.Errorf("missing peer certificate: %v %v, want an error", f, err)
	}
	c.TLS.PeerCert = pki.FilesIn(dir).PeerKey // a key, not a certificate
	if f, err := EtcdFlags(c, cat); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("peer key as certificate: %v %v, want an error", f, err)
	}
}

// TestEtcdFlagsReserved: a reserved flag is refused at launch too (a
// config stored before the check existed), in every spelling, and when a
// catalogue rename is what turns an allowed key into a reserved flag.
func TestEtcdFlagsReserved(t *testing.T) {
	c := withCerts(t, baseConfig())
	for _, v := range []string{"3.5.35", "3.6.16", "3.7.3"} {
		for _, k := range []string{"--experimental-peer-skip-client-san-verification", "peer-skip-client-san-verification", "peer-cert-allowed-cn", "wal-dir"} {
			c.Version = v
			c.ExtraFlags = map[string]string{k: "x"}
			if f, err := EtcdFlags(c, catalogue.Default()); err == nil || !strings.Contains(err.Error(), "cannot be overridden") {
				t.Errorf("%s %s: %v (err %v), want a refusal", v, k, f, err)
			}
		}
	}
	renaming := &catalogue.Catalogue{Minors: []catalogue.Minor{{Minor: "3.6", Latest: "3.6.16",
		RenamedFlags: map[string]string{"harmless-dir": "wal-dir"}}}}
	c.Version = "3.6.16"
	c.ExtraFlags = map[string]string{"harmless-dir": "/elsewhere"}
	if err := ValidateConfig(c); err != nil {
		t.Fatalf("harmless-dir is not reserved by name: %v", err)
	}
	if f, err := EtcdFlags(c, renaming); err == nil || !strings.Contains(err.Error(), `"wal-dir"`) {
		t.Errorf("renamed to wal-dir: %v (err %v), want a refusal", f, err)
	}
}

func TestValidateConfig(t *testing.T) {
	if err := ValidateConfig(baseConfig()); err != nil {
		t.Fatal(err)
	}
	c := baseConfig()
	c.InitialClusterState = "maybe"
	c.ClientURL = ""
	err := ValidateConfig(c)
	if err == nil || !strings.Contains(err.Error(), "initialClusterState") || !strings.Contains(err.Error(), "clientURL") {
		t.Fatalf("want both problems named, got %v", err)
	}
	for _, name := range []string{"", "../../x", "a/b", "..", "Etcd-1", ".hidden"} {
		c := baseConfig()
		c.Name = name
		if err := ValidateConfig(c); err == nil || !strings.Contains(err.Error(), "lower-case letters") {
			t.Errorf("name %q: %v, want a refusal", name, err)
		}
	}
	// Flags Steward owns, with or without dashes, in etcd 3.5's spelling
	// and 3.6's; and a key that would smuggle a value into another flag.
	for key, want := range map[string]string{
		"--data-dir":           "set by Steward from the spec",
		"force-new-cluster":    "cannot be overridden",
		"peer-cert-allowed-cn": "TLS",
		"--experimental-peer-skip-client-san-verification": "TLS",
		"peer-skip-client-san-verification":                "TLS",
		"wal-dir":                                          "where a member keeps its data",
		"config-file":                                      "cannot be overridden",
		"auto-tls":                                         "TLS",
		"discovery-srv":                                    "finds its cluster",
		"data-dir=/tmp/x":                                  "not an etcd flag name",
	} {
		c := baseConfig()
		c.ExtraFlags = map[string]string{key: "x", "max-txn-ops": "256"}
		err := ValidateConfig(c)
		if err == nil || !strings.Contains(err.Error(), "extraFlags") || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "max-txn-ops") {
			t.Errorf("extra flag %q: %v, want a refusal containing %q", key, err, want)
		}
	}
}

func TestCheckVersionStep(t *testing.T) {
	tests := []struct {
		last, next string
		downgrade  bool
		wantErr    string
	}{
		{"3.5.35", "3.5.35", false, ""},
		{"3.5.20", "3.5.35", false, ""},
		{"3.5.35", "3.6.16", false, ""},
		{"3.6.16", "3.7.3", false, ""},
		{"3.5.35", "3.7.3", false, "skips a minor version: upgrade through 3.6 first"},
		{"3.6.16", "3.5.35", false, "older minor version"},
		{"3.6.16", "3.5.35", true, ""},
		{"3.6.16", "4.0.0", false, "different major"},
		{"garbage", "3.6.16", false, "version record holds"},
	}
	for _, tt := range tests {
		err := CheckVersionStep(tt.last, tt.next, tt.downgrade)
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s -> %s: unexpected %v", tt.last, tt.next, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s -> %s: got %v, want %q", tt.last, tt.next, err, tt.wantErr)
		}
	}
}

func TestBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if backoff(100) != maxBackoff {
		t.Error("backoff must be capped")
	}
}

// A member pod advertises its DNS name and listens on the pod's IP: the
// listen flags carry the listen host, the advertised ones the config's URLs.
func TestEtcdFlagsListening(t *testing.T) {
	c := withCerts(t, baseConfig())
	c.ClientURL = "https://db-0.db-peer.ns.svc.cluster.local:2379"
	c.PeerURL = "https://db-0.db-peer.ns.svc.cluster.local:2380"
	f, err := EtcdFlagsListening(c, catalogue.Default(), "10.244.1.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--listen-client-urls=https://10.244.1.7:2379",
		"--advertise-client-urls=https://db-0.db-peer.ns.svc.cluster.local:2379",
		"--listen-peer-urls=https://10.244.1.7:2380",
		"--initial-advertise-peer-urls=https://db-0.db-peer.ns.svc.cluster.local:2380",
	} {
		if !slices.Contains(f, want) {
			t.Errorf("missing %s in %v", want, f)
		}
	}
	for raw, want := range map[string]string{
		"https://a.b:2379": "https://[fd00::1]:2379",
		"http://a.b:12380": "http://[fd00::1]:12380",
		"%%not a url":      "%%not a url",
	} {
		if got := ListenURL(raw, "fd00::1"); got != want {
			t.Errorf("ListenURL(%q) = %q, want %q", raw, got, want)
		}
	}
	if got := ListenURL("https://a.b:2379", ""); got != "https://a.b:2379" {
		t.Errorf("no listen host changed the URL: %s", got)
	}
}
