package spec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func counter() func() (int, error) {
	p := 20000
	return func() (int, error) { p++; return p, nil }
}

func validSpec(t *testing.T, n int) *Cluster {
	t.Helper()
	c, err := NewDefault(DefaultOptions{Members: n, Version: "3.6.16", StewardDir: "/s", FreePort: counter()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewDefault(t *testing.T) {
	c := validSpec(t, 3)
	if len(c.Members) != 3 || c.Members[0].Name != "etcd-1" || c.Members[0].Agent != LocalAgent {
		t.Fatalf("members: %+v", c.Members)
	}
	if !strings.HasPrefix(c.Members[0].ClientURL, "https://127.0.0.1:") || c.TLS.Disabled {
		t.Errorf("TLS must be on by default: %s", c.Members[0].ClientURL)
	}
	if c.Etcd.QuotaBackendBytes != DefaultQuotaBackendBytes || c.Etcd.AutoCompactionMode != "periodic" {
		t.Errorf("defaults not applied: %+v", c.Etcd)
	}
	if w, err := c.Validate(ValidateOptions{}); err != nil || len(w) != 0 {
		t.Fatalf("default spec invalid: %v %v", w, err)
	}
	if got := c.InitialCluster(); strings.Count(got, "=https://") != 3 {
		t.Errorf("initial cluster %q", got)
	}
	if _, err := NewDefault(DefaultOptions{Members: 0, FreePort: counter()}); !errors.Is(err, ErrTooFewMembers) || strings.Contains(err.Error(), "--") {
		t.Errorf("0 members: %v, want ErrTooFewMembers naming no flag", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Cluster)
		wantErr string
		warn    string
	}{
		{name: "valid"},
		{name: "duplicate name", edit: func(c *Cluster) { c.Members[1].Name = c.Members[0].Name }, wantErr: `member "etcd-1" is listed twice`},
		{name: "duplicate port", edit: func(c *Cluster) { c.Members[1].PeerURL = c.Members[0].ClientURL }, wantErr: "address already used by etcd-1 clientURL"},
		{name: "url does not parse", edit: func(c *Cluster) { c.Members[0].ClientURL = "https://127.0.0.1:x" }, wantErr: "does not parse"},
		{name: "url without port", edit: func(c *Cluster) { c.Members[0].ClientURL = "https://127.0.0.1" }, wantErr: "want https://HOST:PORT"},
		{name: "scheme mismatch", edit: func(c *Cluster) { c.Members[0].PeerURL = "http://127.0.0.1:1" }, wantErr: "scheme must be https"},
		{name: "unknown agent", edit: func(c *Cluster) { c.Members[0].Agent = "elsewhere" }, wantErr: `agent "elsewhere" is not in the agents list`},
		{name: "bad version", edit: func(c *Cluster) { c.Version = "3.6" }, wantErr: `version "3.6"`},
		{name: "unknown version", edit: func(c *Cluster) { c.Version = "3.9.9" }, wantErr: "version 3.9.9: not in store"},
		{name: "bad name", edit: func(c *Cluster) { c.Members[0].Name = "Etcd_1" }, wantErr: `member name "Etcd_1"`},
		{name: "shared data dir", edit: func(c *Cluster) { c.Members[1].DataDir = c.Members[0].DataDir }, wantErr: "is also used by etcd-1"},
		{name: "reserved flag", edit: func(c *Cluster) { c.Etcd.ExtraFlags = map[string]string{"--data-dir": "/x"} }, wantErr: "set by Steward from the spec"},
		{name: "reserved TLS flag", edit: func(c *Cluster) { c.Etcd.ExtraFlags = map[string]string{"peer-cert-allowed-cn": "x"} }, wantErr: `etcd.extraFlags "peer-cert-allowed-cn" would change the members' TLS`},
		{name: "reserved old spelling", edit: func(c *Cluster) {
			c.Etcd.ExtraFlags = map[string]string{"--experimental-peer-skip-client-san-verification": "true"}
		}, wantErr: `etcd.extraFlags "--experimental-peer-skip-client-san-verification" would change the members' TLS`},
		{name: "reserved wal dir", edit: func(c *Cluster) { c.Etcd.ExtraFlags = map[string]string{"wal-dir": "/x"} }, wantErr: `etcd.extraFlags "wal-dir" would change where a member keeps its data`},
		{name: "flag key smuggling a value", edit: func(c *Cluster) { c.Etcd.ExtraFlags = map[string]string{"data-dir=/x": "y"} }, wantErr: `etcd.extraFlags "data-dir=/x" is not an etcd flag name`},
		{name: "election timeout", edit: func(c *Cluster) { c.Etcd.ElectionTimeoutMs = 200 }, wantErr: "at least 5 times"},
		{name: "no members", edit: func(c *Cluster) { c.Members = nil }, wantErr: "no members"},
		{name: "minutes allowed", edit: func(c *Cluster) { c.TLS.LeafValidity, c.TLS.RenewBefore = "3m", "1m" }},
		{name: "validity not a duration", edit: func(c *Cluster) { c.TLS.LeafValidity = "1y" }, wantErr: `tls.leafValidity "1y": want a duration like 8760h or 3m`},
		{name: "validity not positive", edit: func(c *Cluster) { c.TLS.CAValidity = "-1h" }, wantErr: `tls.caValidity "-1h": must be positive`},
		{name: "validity shorter than the renewal margin", edit: func(c *Cluster) { c.TLS.LeafValidity, c.TLS.RenewBefore = "24h", "720h" }, wantErr: "tls.renewBefore 720h0m0s is not shorter than tls.leafValidity 24h0m0s"},
		{name: "leaf outlives the CA", edit: func(c *Cluster) { c.TLS.CAValidity = "1000h" }, wantErr: "tls.leafValidity 8760h0m0s is longer than tls.caValidity 1000h0m0s"},
		{name: "even count warns", edit: func(c *Cluster) { c.Members = c.Members[:2] }, warn: "even member count"},
		{name: "metrics on loopback", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "127.0.0.1:9379" }},
		{name: "metrics on any address", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "0.0.0.0:9379" }},
		{name: "metrics without port", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "127.0.0.1" },
			wantErr: `agent local metricsAddress "127.0.0.1": want HOST:PORT`},
		{name: "metrics port out of range", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "127.0.0.1:70000" },
			wantErr: `metricsAddress "127.0.0.1:70000": want HOST:PORT`},
		{name: "metrics on a member's port", edit: func(c *Cluster) {
			c.Agents[0].MetricsAddress = strings.TrimPrefix(c.Members[1].PeerURL, "https://")
		}, wantErr: "etcd-2 peerURL 127.0.0.1:20004: address already used by agent local's metricsAddress"},
		{name: "backup compression better", edit: func(c *Cluster) { c.Backup.Compression = "better" }},
		{name: "backup compression none", edit: func(c *Cluster) { c.Backup.Compression = "none" }},
		{name: "backup compression unknown", edit: func(c *Cluster) { c.Backup.Compression = "max" },
			wantErr: `backup.compression "max": use fastest, default, better or none`},
		{name: "attached", edit: attached(nil)},
		{name: "attached: a version not in the store", edit: attached(func(c *Cluster) { c.Version = "3.5.9" })},
		{name: "attached: etcd's member names", edit: attached(func(c *Cluster) { c.Members[0].Name = "cp-1.example.com" })},
		{name: "attached: peers in clear", edit: attached(func(c *Cluster) { c.Members[0].PeerURL = "http://127.0.0.1:1" })},
		{name: "attached: a member with an agent", edit: attached(func(c *Cluster) { c.Members[0].Agent = LocalAgent }),
			wantErr: `member etcd-1: agent "local": the members of an attached cluster run under no agent`},
		{name: "attached: a member adopted", edit: attached(func(c *Cluster) {
			c.Agents = []Agent{{Name: LocalAgent, Address: "unix:///run/steward/agent.sock"}}
			c.Members[0].Agent, c.Members[0].DataDir, c.Members[0].Adopted = LocalAgent, "/var/lib/etcd", &Adopted{InitialClusterToken: "theirs"}
		})},
		{name: "attached: adopted without its data dir", edit: attached(func(c *Cluster) {
			c.Agents = []Agent{{Name: LocalAgent, Address: "unix:///run/steward/agent.sock"}}
			c.Members[0].Agent, c.Members[0].Adopted = LocalAgent, &Adopted{}
		}), wantErr: `member etcd-1: adopted, but its agent "local" is not in the agents list or its dataDir is empty`},
		{name: "adopted in a cluster Steward made", edit: func(c *Cluster) { c.Members[0].Adopted = &Adopted{} },
			wantErr: "member etcd-1: adopted is set, but the cluster is not attached"},
		{name: "attached: no client certificate", edit: attached(func(c *Cluster) { c.External.CertFile = "" }),
			wantErr: "external.certFile is empty"},
		{name: "attached: certificates taken over", edit: attached(func(c *Cluster) {
			c.External.CAFile, c.External.CertFile, c.External.KeyFile = "", "", ""
			c.Agents = []Agent{{Name: LocalAgent, Address: "unix:///run/steward/agent.sock"}}
			c.Members[0].Agent, c.Members[0].DataDir, c.Members[0].Adopted = LocalAgent, "/var/lib/etcd", &Adopted{InitialClusterToken: "theirs"}
		})},
		{name: "attached: taken over, an adopted member naming certificate files", edit: attached(func(c *Cluster) {
			c.External.CAFile, c.External.CertFile, c.External.KeyFile = "", "", ""
			c.Agents = []Agent{{Name: LocalAgent, Address: "unix:///run/steward/agent.sock"}}
			c.Members[0].Agent, c.Members[0].DataDir, c.Members[0].Adopted = LocalAgent, "/var/lib/etcd", &Adopted{TLS: &AdoptedTLS{CA: "/ca.pem"}}
		}), wantErr: "member etcd-1: adopted.tls names certificate files, but the external block names none"},
		{name: "attached: automatic recovery", edit: attached(func(c *Cluster) { c.Recovery.Mode = "auto" }),
			wantErr: "recovery.mode auto: Steward does not run the members of an attached cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validSpec(t, 3)
			if tt.edit != nil {
				tt.edit(c)
			}
			w, err := c.Validate(ValidateOptions{KnownVersion: func(v string) error {
				if v == "3.6.16" {
					return nil
				}
				return errors.New("not in store")
			}})
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.warn != "" && (len(w) == 0 || !strings.Contains(w[0], tt.warn)) {
				t.Fatalf("warnings %v, want %q", w, tt.warn)
			}
		})
	}
}

// TestTLSValidity: empty fields take the defaults (CA 10 years, leaves a
// year, renewal at two thirds of the lifetime, the expiry warning 30 days
// or half the renewal margin); minutes are allowed.
func TestTLSValidity(t *testing.T) {
	for _, tt := range []struct {
		name string
		tls  TLS
		want CertValidity
	}{
		{"defaults", TLS{}, CertValidity{CA: DefaultCAValidity, Leaf: DefaultLeafValidity, RenewBefore: DefaultLeafValidity / 3, ExpiryWarning: DefaultExpiryWarning}},
		{"minutes", TLS{LeafValidity: "3m"}, CertValidity{CA: DefaultCAValidity, Leaf: 3 * time.Minute, RenewBefore: time.Minute, ExpiryWarning: 30 * time.Second}},
		{"all set", TLS{CAValidity: "48h", LeafValidity: "24h", RenewBefore: "6h", ExpiryWarning: "1h"}, CertValidity{CA: 48 * time.Hour, Leaf: 24 * time.Hour, RenewBefore: 6 * time.Hour, ExpiryWarning: time.Hour}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.tls.Validity()
			if err != nil || got != tt.want {
				t.Fatalf("got %+v %v, want %+v", got, err, tt.want)
			}
		})
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	c := validSpec(t, 3)
	c.Members[2].Bootstrap = &Bootstrap{InitialCluster: "a=https://127.0.0.1:1"}
	p := filepath.Join(t.TempDir(), FileName)
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != c.Token || len(got.Members) != 3 || got.Members[2].Bootstrap.InitialCluster != "a=https://127.0.0.1:1" {
		t.Fatalf("round trip lost data: %+v", got)
	}
}

func TestLoadRejectsUnknownFields(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName)
	c := validSpec(t, 1)
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	b := []byte("membrs: []\n")
	if err := appendFile(p, b); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "membrs") {
		t.Fatalf("a typo in a field name must be an error, got %v", err)
	}
}

func TestFreePortAvoidsEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	free := FreePort("127.0.0.1")
	seen := map[int]bool{}
	for range 20 {
		p, err := free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if hi-lo >= 1000 && (p < lo || p >= hi) {
			t.Fatalf("port %d outside [%d,%d): it may collide with outgoing connections", p, lo, hi)
		}
	}
}

// resolveFake resolves the names the host tests use without DNS.
func resolveFake(h string) ([]string, error) {
	switch h {
	case "localhost":
		return []string{"127.0.0.1", "::1"}, nil
	case "cp-1.example":
		return []string{"10.0.0.11"}, nil
	}
	return nil, errors.New("no such host")
}

func hostsSpec(t *testing.T) *Cluster {
	t.Helper()
	c, err := NewMultiHost(HostsOptions{Version: "3.6.16", Hosts: []Host{
		{"cp-1", "10.0.0.11"}, {"cp-2", "10.0.0.12"}, {"cp-3", "10.0.0.13"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Backup.S3 = &S3{Endpoint: "http://10.0.0.1:9000", Bucket: "b"}
	c.Backup.Continuous = true
	return c
}

func TestNewMultiHost(t *testing.T) {
	c := hostsSpec(t)
	if len(c.Members) != 3 || len(c.Agents) != 3 {
		t.Fatalf("want 3 members over 3 agents: %+v", c)
	}
	for i, m := range c.Members {
		a := c.Agents[i]
		if m.Agent != a.Name || m.ClientURL != "https://"+a.Host+":2379" || m.PeerURL != "https://"+a.Host+":2380" {
			t.Errorf("member %d: %+v on agent %+v", i, m, a)
		}
		if !a.Remote() || a.Endpoint() != "https://"+a.Host+":2378" {
			t.Errorf("agent %+v: endpoint %s", a, a.Endpoint())
		}
	}
	if w, err := c.Validate(ValidateOptions{Resolve: resolveFake}); err != nil || len(w) != 0 {
		t.Fatalf("spec from NewMultiHost: warnings %v, error %v", w, err)
	}
	five, err := NewMultiHost(HostsOptions{Version: "3.6.16", Members: 5, Hosts: c.hostsOf()})
	if err != nil {
		t.Fatal(err)
	}
	if m := five.Members[3]; m.Agent != "cp-1" || m.ClientURL != "https://10.0.0.11:2389" || m.PeerURL != "https://10.0.0.11:2390" {
		t.Errorf("4th member of 5 on 3 hosts: %+v", m)
	}
	if cp, pp := five.NextPorts("cp-1", 2379, 2380); cp != 2399 || pp != 2400 {
		t.Errorf("next ports on cp-1: %d %d", cp, pp)
	}
	if cp, pp := five.NextPorts("cp-3", 2379, 2380); cp != 2389 || pp != 2390 {
		t.Errorf("next ports on cp-3: %d %d", cp, pp)
	}
	if _, err := NewMultiHost(HostsOptions{Hosts: []Host{{"a", "1.2.3.4"}, {"a", "1.2.3.5"}}}); err == nil {
		t.Error("a host given twice accepted")
	}
}

func (c *Cluster) hostsOf() []Host {
	var hs []Host
	for _, a := range c.Agents {
		hs = append(hs, Host{a.Name, a.Host})
	}
	return hs
}

func TestParseHost(t *testing.T) {
	if h, err := ParseHost("cp-1=10.0.0.11"); err != nil || h != (Host{"cp-1", "10.0.0.11"}) {
		t.Fatalf("%+v %v", h, err)
	}
	for _, bad := range []string{"cp-1", "=1.2.3.4", "CP=1.2.3.4", "cp=https://1.2.3.4", "cp=1.2.3.4/24"} {
		if _, err := ParseHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidateHosts(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Cluster)
		wantErr string
		warn    string
		system  bool // resolve with the system resolver, not resolveFake
	}{
		{name: "valid"},
		{name: "member off its agent's host", edit: func(c *Cluster) { c.Members[0].ClientURL = "https://10.0.0.12:2391" },
			wantErr: "10.0.0.12 is not the host of agent cp-1"},
		{name: "a name that resolves to the agent's host", edit: func(c *Cluster) {
			c.Agents[0].Host = "cp-1.example"
		}},
		{name: "two members on one host port, by different names", edit: func(c *Cluster) {
			c.Agents[0].Host = "cp-1.example"
			c.Members = append(c.Members, Member{Name: "etcd-4", Agent: "cp-1", ClientURL: "https://cp-1.example:2389",
				PeerURL: "https://10.0.0.11:2379", DataDir: "members/etcd-4/data"})
		}, wantErr: "address already used by etcd-1 clientURL"},
		{name: "localhost and 127.0.0.1 are one address", edit: func(c *Cluster) {
			c.Agents = append(c.Agents, Agent{Name: "local", Address: "unix:///s/run/agent.sock"})
			c.Members = append(c.Members,
				Member{Name: "etcd-4", Agent: "local", ClientURL: "https://localhost:3000", PeerURL: "https://localhost:3001", DataDir: "a"},
				Member{Name: "etcd-5", Agent: "local", ClientURL: "https://127.0.0.1:3000", PeerURL: "https://127.0.0.1:3002", DataDir: "b"})
		}, wantErr: "address already used by etcd-4 clientURL"},
		{name: "localhost and 127.0.0.1 are one address, resolved by the system", system: true, edit: func(c *Cluster) {
			c.Agents = append(c.Agents, Agent{Name: "local", Address: "unix:///s/run/agent.sock"})
			c.Members = append(c.Members,
				Member{Name: "etcd-4", Agent: "local", ClientURL: "https://localhost:3000", PeerURL: "https://localhost:3001", DataDir: "a"},
				Member{Name: "etcd-5", Agent: "local", ClientURL: "https://127.0.0.1:3000", PeerURL: "https://127.0.0.1:3002", DataDir: "b"})
		}, wantErr: "address already used by etcd-4 clientURL"},
		{name: "a wildcard address takes the port on every address", edit: func(c *Cluster) {
			c.Agents = append(c.Agents, Agent{Name: "local", Address: "unix:///s/run/agent.sock"})
			c.Members = append(c.Members,
				Member{Name: "etcd-4", Agent: "local", ClientURL: "https://127.0.0.1:3000", PeerURL: "https://127.0.0.1:3001", DataDir: "a"},
				Member{Name: "etcd-5", Agent: "local", ClientURL: "https://0.0.0.0:3000", PeerURL: "https://127.0.0.1:3002", DataDir: "b"})
		}, wantErr: "member etcd-5 clientURL 0.0.0.0:3000: address already used by etcd-4 clientURL"},
		{name: "a port taken by a wildcard address", edit: func(c *Cluster) {
			c.Agents = append(c.Agents, Agent{Name: "local", Address: "unix:///s/run/agent.sock"})
			c.Members = append(c.Members,
				Member{Name: "etcd-4", Agent: "local", ClientURL: "https://[::]:3000", PeerURL: "https://127.0.0.1:3001", DataDir: "a"},
				Member{Name: "etcd-5", Agent: "local", ClientURL: "https://localhost:3000", PeerURL: "https://127.0.0.1:3002", DataDir: "b"})
		}, wantErr: "member etcd-5 clientURL localhost:3000: address already used by etcd-4 clientURL"},
		{name: "two voting members on one host warn", edit: func(c *Cluster) {
			c.Members[1].Agent = "cp-1"
			c.Members[1].ClientURL, c.Members[1].PeerURL = "https://10.0.0.11:2389", "https://10.0.0.11:2390"
		}, warn: "members etcd-1, etcd-2 share host cp-1"},
		{name: "unknown host name", edit: func(c *Cluster) { c.Agents[2].Host = "nowhere.example" }, wantErr: `host "nowhere.example" does not resolve`},
		{name: "two agents on one host", edit: func(c *Cluster) { c.Agents[1].Host = "10.0.0.11" }, wantErr: "agents cp-1 and cp-2 are both on host 10.0.0.11"},
		{name: "no port", edit: func(c *Cluster) { c.Agents[1].Port = 0 }, wantErr: "agent cp-2: port 0"},
		{name: "socket and host", edit: func(c *Cluster) { c.Agents[1].Address = "unix:///x" }, wantErr: "either address"},
		{name: "local store without sharing", edit: func(c *Cluster) { c.Backup.S3 = nil }, wantErr: "need a store every host reaches"},
		{name: "shared local store", edit: func(c *Cluster) { c.Backup.S3 = nil; c.Backup.StoreShared = true }},
		{name: "local store without continuous backups", edit: func(c *Cluster) { c.Backup.S3 = nil; c.Backup.Continuous = false }},
		{name: "compaction after deltas and bytes", edit: func(c *Cluster) { c.Backup.CompactAfter = &CompactAfter{Deltas: 100, Bytes: 64 << 20} }},
		{name: "compaction after a negative count", edit: func(c *Cluster) { c.Backup.CompactAfter = &CompactAfter{Deltas: -1} },
			wantErr: "backup.compactAfter.deltas -1 is negative"},
		{name: "compaction after a negative size", edit: func(c *Cluster) { c.Backup.CompactAfter = &CompactAfter{Deltas: 10, Bytes: -5} },
			wantErr: "backup.compactAfter.bytes -5 is negative"},
		{name: "compaction without a bound", edit: func(c *Cluster) { c.Backup.CompactAfter = &CompactAfter{} },
			wantErr: "backup.compactAfter sets neither deltas nor bytes"},
		{name: "metrics on the hosts' addresses and loopbacks", edit: func(c *Cluster) {
			c.Agents[0].MetricsAddress = "10.0.0.11:9379"
			c.Agents[1].MetricsAddress = "127.0.0.1:9379"
			c.Agents[2].MetricsAddress = "127.0.0.1:9379"
		}},
		{name: "metrics on another host's address", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "10.0.0.12:9379" },
			wantErr: "agent cp-1 metricsAddress 10.0.0.12:9379: 10.0.0.12 is not the agent's host"},
		{name: "metrics host that does not resolve", edit: func(c *Cluster) { c.Agents[0].MetricsAddress = "nowhere.example:9379" },
			wantErr: `agent cp-1 metricsAddress: host "nowhere.example" does not resolve`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hostsSpec(t)
			if tt.edit != nil {
				tt.edit(c)
			}
			o := ValidateOptions{Resolve: resolveFake}
			if tt.system {
				o.Resolve = nil
			}
			w, err := c.Validate(o)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.warn == "" && len(w) > 0 && tt.wantErr == "" {
				t.Fatalf("unexpected warnings %v", w)
			}
			if tt.warn != "" && (len(w) == 0 || !strings.Contains(strings.Join(w, "\n"), tt.warn)) {
				t.Fatalf("warnings %v, want %q", w, tt.warn)
			}
		})
	}
}

// attached turns a spec into an attached cluster's (members under no
// agent, no data dirs, the operator's certificate files), then edits it.
func attached(edit func(*Cluster)) func(*Cluster) {
	return func(c *Cluster) {
		c.External = &External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/client.crt", KeyFile: "/etc/etcd/client.key", ClusterID: "feed"}
		c.Agents = nil
		for i := range c.Members {
			c.Members[i].Agent, c.Members[i].DataDir = "", ""
		}
		if edit != nil {
			edit(c)
		}
	}
}

// TestNewDefaultMetrics: a default spec's agent serves metrics on loopback:
// the members' address when it is a loopback one, else 127.0.0.1, at a
// port no member uses; NoMetrics leaves the address empty.
func TestNewDefaultMetrics(t *testing.T) {
	next := 30000
	free := func() (int, error) { next++; return next, nil }
	for _, tc := range []struct {
		host, want string
	}{
		{"127.0.0.7", "127.0.0.7:"},
		{"10.1.2.3", "127.0.0.1:"},
	} {
		s, err := NewDefault(DefaultOptions{Members: 3, Version: "3.6.16", StewardDir: "/d", Host: tc.host, FreePort: free})
		if err != nil {
			t.Fatal(err)
		}
		a := s.Agents[0].MetricsAddress
		if !strings.HasPrefix(a, tc.want) {
			t.Errorf("host %s: metricsAddress %q, want %sPORT", tc.host, a, tc.want)
		}
		for _, m := range s.Members {
			if strings.HasSuffix(m.ClientURL, a[strings.LastIndex(a, ":"):]) || strings.HasSuffix(m.PeerURL, a[strings.LastIndex(a, ":"):]) {
				t.Errorf("host %s: metrics port %s also a member's (%s %s)", tc.host, a, m.ClientURL, m.PeerURL)
			}
		}
		if _, err := s.Validate(ValidateOptions{}); err != nil {
			t.Errorf("host %s: default spec invalid: %v", tc.host, err)
		}
	}
	s, err := NewDefault(DefaultOptions{Members: 1, Version: "3.6.16", StewardDir: "/d", Host: "127.0.0.1", FreePort: free, NoMetrics: true})
	if err != nil || s.Agents[0].MetricsAddress != "" {
		t.Errorf("NoMetrics: metricsAddress %q, %v", s.Agents[0].MetricsAddress, err)
	}
}

// A spec of member pods (PodHosts) validates with host names that do not
// resolve (the pods do not exist yet, or one is being recreated), and
// still refuses two agents on one name and a member off its agent's host.
func TestPodHostsValidate(t *testing.T) {
	hosts := []Host{{"db-0", "db-0.db-peer.ns.svc.cluster.local"}, {"db-1", "db-1.db-peer.ns.svc.cluster.local"}, {"db-2", "db-2.db-peer.ns.svc.cluster.local"}}
	c, err := NewMultiHost(HostsOptions{Name: "db", Version: "3.6.16", Hosts: hosts, PodHosts: true})
	if err != nil {
		t.Fatal(err)
	}
	noDNS := func(h string) ([]string, error) { return nil, fmt.Errorf("no such host %s", h) }
	if _, err := c.Validate(ValidateOptions{Resolve: noDNS}); err != nil {
		t.Fatalf("pod hosts looked up: %v", err)
	}
	c.PodHosts = false
	if _, err := c.Validate(ValidateOptions{Resolve: noDNS}); err == nil || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("host hosts not looked up: %v", err)
	}
	c.PodHosts = true
	twice := c.Clone()
	twice.Agents[1].Host = strings.ToUpper(twice.Agents[0].Host)
	if _, err := twice.Validate(ValidateOptions{Resolve: noDNS}); err == nil || !strings.Contains(err.Error(), "both on host") {
		t.Errorf("two agents on one pod name: %v", err)
	}
	names := c.Clone()
	names.TLS.ServerNames = []string{"db-client.ns.svc", "https://db-client:2379"}
	if _, err := names.Validate(ValidateOptions{Resolve: noDNS}); err == nil || !strings.Contains(err.Error(), `tls.serverNames "https://db-client:2379": want a DNS name`) || strings.Contains(err.Error(), `"db-client.ns.svc"`) {
		t.Errorf("server names: %v", err)
	}
	off := c.Clone()
	off.Members[0].ClientURL = "https://db-1.db-peer.ns.svc.cluster.local:2379"
	if _, err := off.Validate(ValidateOptions{Resolve: noDNS}); err == nil || !strings.Contains(err.Error(), "is not the host of agent db-0") {
		t.Errorf("member off its pod: %v", err)
	}
}
