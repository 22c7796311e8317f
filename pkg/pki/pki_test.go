package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnsure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if err := Ensure(dir, "test", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cert dir mode: %v %v", fi.Mode(), err)
	}
	for _, k := range []string{CAKey, ServerKey, PeerKey, ClientKey} {
		fi, err := os.Stat(filepath.Join(dir, k))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v err %v, want 0600", k, fi.Mode(), err)
		}
	}
	ca := mustCert(t, filepath.Join(dir, CACert))
	server := mustCert(t, filepath.Join(dir, ServerCert))
	if err := server.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("server cert not signed by CA: %v", err)
	}
	if err := server.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if _, err := ClientTLS(dir); err != nil {
		t.Fatal(err)
	}

	// Same hosts: nothing reissued.
	if err := Ensure(dir, "test", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if again := mustCert(t, filepath.Join(dir, ServerCert)); again.SerialNumber.Cmp(server.SerialNumber) != 0 {
		t.Error("server certificate reissued although it covered every host")
	}
	// A new host: server and peer reissued by the same CA.
	if err := Ensure(dir, "test", []string{"127.0.0.1", "10.1.2.3", "etcd-a.example"}); err != nil {
		t.Fatal(err)
	}
	re := mustCert(t, filepath.Join(dir, PeerCert))
	for _, h := range []string{"10.1.2.3", "etcd-a.example", "localhost"} {
		if err := re.VerifyHostname(h); err != nil {
			t.Errorf("reissued peer cert: %v", err)
		}
	}
	if err := re.CheckSignatureFrom(ca); err != nil {
		t.Errorf("reissued cert not signed by the same CA: %v", err)
	}
	if mustCert(t, filepath.Join(dir, CACert)).SerialNumber.Cmp(ca.SerialNumber) != 0 {
		t.Error("CA was replaced")
	}
}

// A CA certificate without its key (a coordinator that took over with the
// admin credentials only) is never replaced by a new CA.
func TestEnsureKeepsCAWithoutKey(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, CAKey)); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(dir, "c1", nil); err != nil {
		t.Fatalf("valid admin credentials without the CA key: %v", err)
	}
	// A certificate to issue: refused, naming the key, the CA kept.
	if err := Ensure(dir, "c1", []string{"10.0.0.9"}); !errors.Is(err, ErrNoCAKey) {
		t.Fatalf("issuing without the CA key: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CACert))
	if string(after) != string(before) {
		t.Fatal("the CA certificate was replaced")
	}
	if _, err := os.Stat(filepath.Join(dir, CAKey)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a CA key appeared")
	}
}

// TestEnsureValidity: the CA and the leaves get the lifetimes asked for
// (minutes too), and a leaf past its renewal point is reissued with the same
// key, so the certificate file is the one file that changes.
func TestEnsureValidity(t *testing.T) {
	dir := t.TempDir()
	v := Validity{CA: 48 * time.Hour, Leaf: 3 * time.Minute, RenewBefore: time.Minute}
	if err := EnsureWith(dir, "c1", nil, v); err != nil {
		t.Fatal(err)
	}
	ca := mustCert(t, filepath.Join(dir, CACert))
	if d := time.Until(ca.NotAfter); d < 47*time.Hour || d > 48*time.Hour {
		t.Errorf("CA lifetime left %s, want about 48h", d)
	}
	server := mustCert(t, filepath.Join(dir, ServerCert))
	if d := server.NotAfter.Sub(server.NotBefore); d != 3*time.Minute+18*time.Second {
		t.Errorf("server lifetime %s, want 3m plus the backdating of 18s", d)
	}
	key, _ := os.ReadFile(filepath.Join(dir, ServerKey))

	// Not due yet: kept.
	if err := EnsureWith(dir, "c1", nil, v); err != nil {
		t.Fatal(err)
	}
	if mustCert(t, filepath.Join(dir, ServerCert)).SerialNumber.Cmp(server.SerialNumber) != 0 {
		t.Fatal("a leaf not due for renewal was reissued")
	}
	// Due (a margin longer than what is left): reissued, same key.
	if err := EnsureWith(dir, "c1", nil, Validity{CA: 48 * time.Hour, Leaf: 10 * time.Minute, RenewBefore: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	re := mustCert(t, filepath.Join(dir, ServerCert))
	if re.SerialNumber.Cmp(server.SerialNumber) == 0 {
		t.Fatal("a leaf past its renewal point was kept")
	}
	if again, _ := os.ReadFile(filepath.Join(dir, ServerKey)); string(again) != string(key) {
		t.Error("the renewed leaf got a new key")
	}
	if err := EnsureWith(dir, "c1", nil, Validity{Leaf: time.Hour, RenewBefore: 2 * time.Hour}); !errors.Is(err, ErrBadValidity) {
		t.Errorf("a margin longer than the lifetime: %v, want ErrBadValidity", err)
	}
}

// TestEnsureRefusesBadFiles: a certificate that does not parse, a key that
// does not match its certificate, a leaf another CA signed: one error
// each, naming the file, and no file replaced.
func TestEnsureRefusesBadFiles(t *testing.T) {
	other := t.TempDir()
	if err := Ensure(other, "other", nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		want    error
		file    string
	}{
		{"certificate does not parse", func(t *testing.T, dir string) { write(t, filepath.Join(dir, ServerCert), "garbage") }, ErrUnparsable, ServerCert},
		{"key does not parse", func(t *testing.T, dir string) { write(t, filepath.Join(dir, PeerKey), "garbage") }, ErrUnparsable, PeerKey},
		{"key of another certificate", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, PeerKey), filepath.Join(dir, ServerKey))
		}, ErrKeyMismatch, ServerKey},
		{"leaf of another CA", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(other, ClientCert), filepath.Join(dir, ClientCert))
			copyFile(t, filepath.Join(other, ClientKey), filepath.Join(dir, ClientKey))
		}, ErrNotSignedByCA, ClientCert},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Ensure(dir, "c1", nil); err != nil {
				t.Fatal(err)
			}
			tt.breakIt(t, dir)
			before := snapshot(t, dir)
			// A new host would reissue server and peer: refused all the same.
			err := Ensure(dir, "c1", []string{"10.0.0.7"})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.file) {
				t.Fatalf("Ensure: %v, want %v naming %s", err, tt.want, tt.file)
			}
			if after := snapshot(t, dir); !maps.Equal(before, after) {
				t.Fatal("a file was replaced or added after the refusal")
			}
		})
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	write(t, to, string(b))
}

// snapshot maps every file under dir to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInventoryAndIssueClient: the inventory lists the CA, the leaves and
// issued clients with their details; a file that does not parse is listed
// with its error; Steward's own identities cannot be issued as clients.
func TestInventoryAndIssueClient(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "kas")
	f, err := IssueClient(dir, "c1", "kube-apiserver", 2*time.Hour, out, Validity{})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("copied key %s: %v %v", f.Key, fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, ClientsDir, "kube-apiserver.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("recorded key: %v", err)
	}
	if _, err := ClientTLSFiles(f.CA, f.Cert, f.Key); err != nil {
		t.Errorf("copied pair: %v", err)
	}
	for _, bad := range []string{"steward", "steward-agent:h1", "c1-peer", "Kube", ""} {
		if _, err := IssueClient(dir, "c1", bad, 0, "", Validity{}); !errors.Is(err, ErrBadClientName) {
			t.Errorf("client %q: %v, want ErrBadClientName", bad, err)
		}
	}
	if _, err := IssueClient(dir, "c1", "late", 20*365*24*time.Hour, "", Validity{}); !errors.Is(err, ErrBadValidity) {
		t.Errorf("client outliving the CA: %v", err)
	}
	write(t, filepath.Join(dir, AgentCert), "garbage")
	inv, err := Inventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]CertInfo{}
	for _, i := range inv {
		byName[i.Name] = i
	}
	for _, n := range []string{"ca", "server", "peer", "client", "agent", "clients/kube-apiserver"} {
		if _, ok := byName[n]; !ok {
			t.Errorf("inventory misses %s: %+v", n, inv)
		}
	}
	if a := byName["agent"]; !strings.Contains(a.Error, "does not parse") {
		t.Errorf("unparsable agent.crt: %+v", a)
	}
	k := byName["clients/kube-apiserver"]
	if k.Subject != "kube-apiserver" || k.Remaining() > 2*time.Hour || k.Remaining() < time.Hour {
		t.Errorf("issued client: %+v", k)
	}
	if s := byName["server"]; !slices.Contains(s.SANs, "10.0.0.1") || s.Serial == "" || !byName["ca"].IsCA {
		t.Errorf("server: %+v", s)
	}
}

// TestServedCert: the live handshake reports the certificate the server
// loads at that handshake (here, like etcd, from the files at each one), so
// a renewal shows up on the next connection.
func TestServedCert(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	f := FilesIn(dir)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
		return &c, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	pool, err := CAPool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ServedCert(t.Context(), ln.Addr().String(), pool, nil)
	if err != nil || got.SerialNumber.Cmp(mustCert(t, f.ServerCert).SerialNumber) != 0 {
		t.Fatalf("served: %v", err)
	}
	// Renewed (pkg/certs.RenewDir's reissue): the next handshake serves it.
	ca, caKey, err := loadPair(f.CA, filepath.Join(dir, CAKey))
	if err != nil {
		t.Fatal(err)
	}
	cur, key, err := loadLeaf(f.ServerCert, f.ServerKey, ca)
	if err != nil {
		t.Fatal(err)
	}
	der, err := reissue(cur, &key.PublicKey, ca, caKey, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replaceLeaf("server", f.ServerCert, cur, nc, pemCert(der)); err != nil {
		t.Fatal(err)
	}
	got, err = ServedCert(t.Context(), ln.Addr().String(), pool, nil)
	if err != nil || got.SerialNumber.Cmp(mustCert(t, f.ServerCert).SerialNumber) != 0 {
		t.Fatalf("served after renewal: %v", err)
	}
	// Another CA: the certificate still comes back, with the error.
	other := t.TempDir()
	if err := Ensure(other, "x", nil); err != nil {
		t.Fatal(err)
	}
	otherPool, _ := CAPool(filepath.Join(other, CACert))
	if got, err := ServedCert(t.Context(), ln.Addr().String(), otherPool, nil); got == nil || err == nil {
		t.Fatalf("a certificate of another CA: %v %v", got, err)
	}
}

// TestEnsureNewCAReissuesAll: without any CA, a new one is created and every
// leaf there (signed by the CA that is gone) reissued with a new key.
func TestEnsureNewCAReissuesAll(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	oldKey, _ := os.ReadFile(filepath.Join(dir, ServerKey))
	for _, f := range []string{CACert, CAKey} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	ca := mustCert(t, filepath.Join(dir, CACert))
	for _, c := range []string{ServerCert, PeerCert, ClientCert} {
		if err := mustCert(t, filepath.Join(dir, c)).CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s not reissued by the new CA: %v", c, err)
		}
	}
	if k, _ := os.ReadFile(filepath.Join(dir, ServerKey)); string(k) == string(oldKey) {
		t.Error("the server key was kept across CAs")
	}
}

// TestDescribeFileBundle: an operator's file holding several certificates
// (a CA bundle, a client certificate with its chain) lists each of them,
// so one that expires before the first is seen; a file without a
// certificate is one entry with its error.
func TestDescribeFileBundle(t *testing.T) {
	now := time.Now()
	a, b := t.TempDir(), t.TempDir()
	if err := EnsureWith(a, "one", []string{"127.0.0.1"}, Validity{CA: 48 * time.Hour, Leaf: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureWith(b, "two", []string{"127.0.0.1"}, Validity{CA: 24 * time.Hour, Leaf: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(a, CACert))
	ca2, _ := os.ReadFile(filepath.Join(b, CACert))
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	write(t, bundle, string(ca1)+"# comment lines between blocks are allowed\n"+string(ca2))
	got := DescribeFile("external ca", bundle, now)
	if len(got) != 2 || got[0].Name != "external ca" || got[1].Name != "external ca#2" {
		t.Fatalf("bundle of two CAs: %+v", got)
	}
	if got[1].Subject == got[0].Subject || got[1].Remaining() > 25*time.Hour || got[0].Remaining() < 47*time.Hour {
		t.Errorf("second CA not described as itself: %+v", got)
	}
	for _, i := range got {
		if i.File != bundle || i.Error != "" {
			t.Errorf("%+v", i)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	write(t, empty, "not a certificate")
	if got := DescribeFile("external client", empty, now); len(got) != 1 || !strings.Contains(got[0].Error, "no PEM certificate") {
		t.Errorf("file without a certificate: %+v", got)
	}
	if got := DescribeFile("external client", filepath.Join(t.TempDir(), "missing.pem"), now); len(got) != 1 || got[0].Error == "" {
		t.Errorf("missing file: %+v", got)
	}
}

// A host's server certificate carries the extra server names (a Service in
// front of the members); its other leaves do not.
func TestIssueHostServerNames(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, "db", nil); err != nil {
		t.Fatal(err)
	}
	b, err := IssueHost(dir, "db", "db-0", "db-0.db-peer.prod.svc.cluster.local", Validity{}, "db-client", "db-client.prod.svc.cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	parse := func(p []byte) *x509.Certificate {
		blk, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := parse(b.ServerCert)
	for _, n := range []string{"db-0.db-peer.prod.svc.cluster.local", "localhost", "db-client", "db-client.prod.svc.cluster.local"} {
		if err := srv.VerifyHostname(n); err != nil {
			t.Errorf("server certificate: %v", err)
		}
	}
	if err := parse(b.PeerCert).VerifyHostname("db-client"); err == nil {
		t.Error("the peer certificate carries the client Service's name")
	}
}
