package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// TestRenew: due leaves are renewed (same subject, names, key; new serial),
// the previous certificate kept beside until ForgetPrevious; named leaves
// and force; no CA key refused.
func TestRenew(t *testing.T) {
	dir := t.TempDir()
	if err := pki.EnsureWith(dir, "c1", []string{"10.0.0.1"}, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if got, err := RenewDir(dir, pki.Validity{}, nil, false, time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("nothing due: %v %v", got, err)
	}
	old := mustCert(t, filepath.Join(dir, pki.PeerCert))
	oldKey, _ := os.ReadFile(filepath.Join(dir, pki.PeerKey))
	// A year later every default leaf is due.
	got, err := RenewDir(dir, pki.Validity{}, nil, false, time.Now().Add(300*24*time.Hour))
	if err != nil || len(got) != 3 {
		t.Fatalf("renew all due: %v %v", got, err)
	}
	nc := mustCert(t, filepath.Join(dir, pki.PeerCert))
	if nc.SerialNumber.Cmp(old.SerialNumber) == 0 || nc.Subject.CommonName != old.Subject.CommonName || nc.VerifyHostname("10.0.0.1") != nil {
		t.Fatalf("renewed peer: serial %x cn %s", nc.SerialNumber, nc.Subject.CommonName)
	}
	if k, _ := os.ReadFile(filepath.Join(dir, pki.PeerKey)); string(k) != string(oldKey) {
		t.Error("renewal changed the key")
	}
	if _, err := pki.ClientTLS(dir); err != nil {
		t.Errorf("renewed client pair: %v", err)
	}
	if prev := mustCert(t, filepath.Join(dir, pki.PeerCert+pki.PrevSuffix)); prev.SerialNumber.Cmp(old.SerialNumber) != 0 {
		t.Error("the previous certificate was not kept")
	}
	for _, r := range got {
		if err := pki.ForgetPrevious(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, pki.PeerCert+pki.PrevSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Error("ForgetPrevious left the previous certificate")
	}
	got, err = RenewDir(dir, pki.Validity{}, []string{"server"}, true, time.Now())
	if err != nil || len(got) != 1 || got[0].Name != "server" {
		t.Fatalf("renew server by name: %v %v", got, err)
	}
	if _, err := RenewDir(dir, pki.Validity{}, []string{"nope"}, true, time.Now()); !errors.Is(err, pki.ErrUnknownCert) {
		t.Errorf("unknown name: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, pki.CAKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := RenewDir(dir, pki.Validity{}, nil, true, time.Now()); !errors.Is(err, pki.ErrNoCAKey) {
		t.Errorf("without the CA key: %v", err)
	}
}

// TestInstallTrustBundleCaller: a trust bundle that would not verify the
// certificate of the request pushing it (the coordinator's admin) is
// refused and nothing is written; one that does is installed; a CA not
// valid now is refused.
func TestInstallTrustBundleCaller(t *testing.T) {
	root := t.TempDir()
	coord, host, other := filepath.Join(root, "coord"), filepath.Join(root, "host"), filepath.Join(root, "other")
	for _, d := range []string{coord, other} {
		if err := pki.Ensure(d, "c", []string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := pki.IssueHost(coord, "c", "cp-2", "10.0.0.12", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteHost(host, b); err != nil {
		t.Fatal(err)
	}
	admin := mustCert(t, filepath.Join(coord, pki.ClientCert))
	stranger := mustCert(t, filepath.Join(other, pki.ClientCert))
	if err := RotationPrepare(coord, "c", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(coord); err != nil {
		t.Fatal(err)
	}
	both, err := os.ReadFile(filepath.Join(coord, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(host, pki.CACert))
	now := time.Now()
	for _, tc := range []struct {
		name   string
		caller bool
		now    time.Time
		want   string
	}{
		{name: "a caller the bundle does not verify", now: now, want: "the agent would refuse its coordinator"},
		{name: "a CA expired", caller: true, now: now.Add(30 * 365 * 24 * time.Hour), want: "is not valid now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caller := stranger
			if tc.caller {
				caller = admin
			}
			_, err := pki.InstallTrustBundle(host, both, caller, tc.now)
			if !errors.Is(err, pki.ErrBadTrustBundle) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InstallTrustBundle: %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(filepath.Join(host, pki.CACert)); string(after) != string(before) {
				t.Error("ca.crt changed after a refusal")
			}
		})
	}
	r, err := pki.InstallTrustBundle(host, both, admin, now)
	if err != nil || !r.Changed || len(r.CAs) != 2 {
		t.Fatalf("InstallTrustBundle: %+v %v", r, err)
	}
}

// TestImportAndIssueTakeOver: the CA is imported (key 0600, directory
// 0700), the leaves carry the names and common names asked for and chain
// to it; a second run (a resumed take-over) changes nothing; a directory
// holding another CA is refused. A leaf reissued later by EnsureWith keeps
// its common name and names (the peer name the members let in).
func TestImportAndIssueTakeOver(t *testing.T) {
	cp, kp, caCert, _ := operatorCA(t, t.TempDir(), true)
	ca, err := pki.LoadCA(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	l := TakeOverLeaves{
		Server: Leaf{CN: "kube-server", Hosts: []string{"127.0.0.1", "etcd.example.com", "localhost"}},
		Peer:   Leaf{CN: "etcd-peer", Hosts: []string{"127.0.0.1", "localhost"}},
	}
	if err := ImportCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	if err := IssueTakeOver(dir, l, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, pki.CAKey): 0o600, filepath.Join(dir, pki.ServerKey): 0o600, filepath.Join(dir, pki.PeerKey): 0o600, filepath.Join(dir, pki.ClientKey): 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, want mode %v", p, err, want)
		}
	}
	for f, want := range map[string]string{pki.ServerCert: "kube-server", pki.PeerCert: "etcd-peer", pki.ClientCert: pki.AdminCN} {
		c := mustCert(t, filepath.Join(dir, f))
		if c.Subject.CommonName != want || c.CheckSignatureFrom(caCert) != nil {
			t.Errorf("%s: common name %q (want %q), signed by the operator's CA: %v", f, c.Subject.CommonName, want, c.CheckSignatureFrom(caCert))
		}
	}
	if s := mustCert(t, filepath.Join(dir, pki.ServerCert)); s.VerifyHostname("etcd.example.com") != nil || s.VerifyHostname("127.0.0.1") != nil {
		t.Errorf("server certificate names %v %v", s.DNSNames, s.IPAddresses)
	}
	before := snapshot(t, dir)
	if err := ImportCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	if err := IssueTakeOver(dir, l, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("a second take-over changed %v", slices.Sorted(maps.Keys(after)))
	}
	otherCert, otherKey, _, _ := operatorCA(t, t.TempDir(), true)
	other, err := pki.LoadCA(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := ImportCA(dir, other); !errors.Is(err, ErrOtherCA) {
		t.Errorf("ImportCA over another CA = %v, want ErrOtherCA", err)
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Error("a refused import changed the directory")
	}

	// A new member's address: EnsureWith reissues with the same key and
	// keeps the peer's common name and every name it had.
	if err := pki.EnsureWith(dir, "kube", []string{"10.0.0.7"}, pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	p := mustCert(t, filepath.Join(dir, pki.PeerCert))
	if p.Subject.CommonName != "etcd-peer" || p.VerifyHostname("10.0.0.7") != nil {
		t.Errorf("reissued peer certificate: %q, names %v", p.Subject.CommonName, p.IPAddresses)
	}
	if s := mustCert(t, filepath.Join(dir, pki.ServerCert)); s.VerifyHostname("etcd.example.com") != nil || s.VerifyHostname("10.0.0.7") != nil {
		t.Errorf("reissued server certificate lost a name: %v %v", s.DNSNames, s.IPAddresses)
	}
	// No client may take the peer name.
	if _, err := pki.IssueClient(dir, "kube", "etcd-peer", 0, "", pki.Validity{}); !errors.Is(err, pki.ErrBadClientName) {
		t.Errorf("IssueClient with the peer certificate's name = %v, want ErrBadClientName", err)
	}
}

// operatorCA writes a CA made with Go's crypto as an operator's (not by
// this package) into dir: ca.pem, ca-key.pem; and returns them.
func operatorCA(t *testing.T, dir string, isCA bool) (string, string, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "operator-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(2 * 365 * 24 * time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	write(t, cp, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, kp, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	return cp, kp, cert, key
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

// TestRenewDirRefusesBadFiles: a leaf that does not parse, a key that does
// not match, a leaf of another CA: refused, nothing written.
func TestRenewDirRefusesBadFiles(t *testing.T) {
	other := t.TempDir()
	if err := pki.Ensure(other, "other", nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		want    error
		file    string
	}{
		{"certificate does not parse", func(t *testing.T, dir string) { write(t, filepath.Join(dir, pki.ServerCert), "garbage") }, pki.ErrUnparsable, pki.ServerCert},
		{"key does not parse", func(t *testing.T, dir string) { write(t, filepath.Join(dir, pki.PeerKey), "garbage") }, pki.ErrUnparsable, pki.PeerKey},
		{"key of another certificate", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, pki.PeerKey), filepath.Join(dir, pki.ServerKey))
		}, pki.ErrKeyMismatch, pki.ServerKey},
		{"leaf of another CA", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(other, pki.ClientCert), filepath.Join(dir, pki.ClientCert))
			copyFile(t, filepath.Join(other, pki.ClientKey), filepath.Join(dir, pki.ClientKey))
		}, pki.ErrNotSignedByCA, pki.ClientCert},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := pki.Ensure(dir, "c1", nil); err != nil {
				t.Fatal(err)
			}
			tt.breakIt(t, dir)
			before := snapshot(t, dir)
			_, err := RenewDir(dir, pki.Validity{}, nil, true, time.Now())
			if !errors.Is(err, tt.want) {
				t.Fatalf("Renew: %v, want %v", err, tt.want)
			}
			if after := snapshot(t, dir); !maps.Equal(before, after) {
				t.Fatal("a file was replaced or added after the refusal")
			}
		})
	}
}
