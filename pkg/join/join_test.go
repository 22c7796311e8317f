package join

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// fixture makes a CA and the join file of host cp-1 at 10.0.0.11.
func fixture(t testing.TB, token string) (*File, string) {
	t.Helper()
	ca := t.TempDir()
	if err := pki.Ensure(ca, "c1", nil); err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueHost(ca, "c1", "cp-1", "10.0.0.11", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	return New("c1", token, "cp-1", "10.0.0.11", 2378, b, time.Now().Add(time.Hour)), ca
}

var here = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.11")}

func TestApplyWritesIdentityAndCertificates(t *testing.T) {
	f, _ := fixture(t, "tok-a")
	p := filepath.Join(t.TempDir(), "join", "cp-1.yaml")
	if err := f.Write(p); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("join file mode: %v %v", fi.Mode(), err)
	}
	read, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id, err := Apply(dir, read, time.Now(), here)
	if err != nil {
		t.Fatal(err)
	}
	if id.Agent != "cp-1" || id.Listen() != "10.0.0.11:2378" {
		t.Fatalf("identity %+v", id)
	}
	if got, err := LoadIdentity(dir); err != nil || *got != *id {
		t.Fatalf("identity read back %+v %v", got, err)
	}
	for _, k := range []string{pki.AgentKey, pki.ServerKey, pki.PeerKey} {
		if fi, err := os.Stat(filepath.Join(dir, "pki", k)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", k, fi, err)
		}
	}
	if _, err := pki.AgentServerTLS(filepath.Join(dir, "pki")); err != nil {
		t.Fatalf("the agent cannot serve with what it joined with: %v", err)
	}
	// The same host's file again is fine (new certificates).
	if _, err := Apply(dir, read, time.Now(), here); err != nil {
		t.Fatalf("re-applying the same host's file: %v", err)
	}
}

func TestBadJoinFilesChangeNothing(t *testing.T) {
	good, _ := fixture(t, "tok-a")
	other, _ := fixture(t, "tok-b")
	otherHost := *good
	otherHost.Agent = "cp-2"
	swapped := *good
	swapped.AgentKey = other.AgentKey
	tests := []struct {
		name    string
		f       *File
		now     time.Time
		addrs   []net.IP
		prior   *File
		wantErr string
		is      error
	}{
		{name: "expired", f: good, now: time.Now().Add(2 * time.Hour), wantErr: "join file expired at ", is: ErrExpired},
		{name: "address not on this machine", f: good, addrs: []net.IP{net.ParseIP("127.0.0.1")}, wantErr: "no interface here has that address", is: ErrNotThisHost},
		{name: "another cluster's file", f: other, prior: good, wantErr: "already belongs to cluster c1 (token tok-a)", is: ErrOtherCluster},
		{name: "agent certificate of another host", f: &otherHost, wantErr: `agent certificate is for "steward-agent:cp-1", not "steward-agent:cp-2"`},
		{name: "key of another certificate", f: &swapped, wantErr: "agent certificate: tls: private key does not match public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.prior != nil {
				if _, err := Apply(dir, tt.prior, time.Now(), here); err != nil {
					t.Fatal(err)
				}
			}
			before := tree(t, dir)
			now := tt.now
			if now.IsZero() {
				now = time.Now()
			}
			addrs := tt.addrs
			if addrs == nil {
				addrs = here
			}
			_, err := Apply(dir, tt.f, now, addrs)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("error %v is not %v", err, tt.is)
			}
			if after := tree(t, dir); after != before {
				t.Fatalf("a refused join changed the directory:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// tree lists every file under dir with its size and modification time.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.ModTime().String() + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestParseRefusesOtherFiles(t *testing.T) {
	for _, in := range []string{"kind: Cluster\n", "kind: JoinFile\nagnet: x\n", "{", ""} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%q parsed as a join file", in)
		}
	}
}

func FuzzParse(f *testing.F) {
	good, _ := fixture(f, "tok")
	p := filepath.Join(f.TempDir(), "j.yaml")
	if err := good.Write(p); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Add([]byte("kind: JoinFile\nport: 99999\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		jf, err := Parse(in)
		if err != nil {
			return
		}
		// Whatever parses must be checked without a panic.
		_ = jf.Check(time.Now(), nil)
	})
}
