package spec

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
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
	if _, err := NewDefault(DefaultOptions{Members: 0, FreePort: counter()}); err == nil {
		t.Error("0 members accepted")
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
		{name: "even count warns", edit: func(c *Cluster) { c.Members = c.Members[:2] }, warn: "even member count"},
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
