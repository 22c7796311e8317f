package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readCert(t *testing.T, p string) *x509.Certificate {
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
	ca := readCert(t, filepath.Join(dir, CACert))
	server := readCert(t, filepath.Join(dir, ServerCert))
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
	if again := readCert(t, filepath.Join(dir, ServerCert)); again.SerialNumber.Cmp(server.SerialNumber) != 0 {
		t.Error("server certificate reissued although it covered every host")
	}
	// A new host: server and peer reissued by the same CA.
	if err := Ensure(dir, "test", []string{"127.0.0.1", "10.1.2.3", "etcd-a.example"}); err != nil {
		t.Fatal(err)
	}
	re := readCert(t, filepath.Join(dir, PeerCert))
	for _, h := range []string{"10.1.2.3", "etcd-a.example", "localhost"} {
		if err := re.VerifyHostname(h); err != nil {
			t.Errorf("reissued peer cert: %v", err)
		}
	}
	if err := re.CheckSignatureFrom(ca); err != nil {
		t.Errorf("reissued cert not signed by the same CA: %v", err)
	}
	if readCert(t, filepath.Join(dir, CACert)).SerialNumber.Cmp(ca.SerialNumber) != 0 {
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

// TestEnsureBackupAuthKey: created once, 0600, 64 hex digits; a second call
// keeps it; a host bundle carries it and WriteHost writes it 0600.
func TestEnsureBackupAuthKey(t *testing.T) {
	dir := t.TempDir()
	created, err := EnsureBackupAuthKey(dir)
	if err != nil || !created {
		t.Fatalf("first: %v %v", created, err)
	}
	p := filepath.Join(dir, BackupAuthKey)
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if len(strings.TrimSpace(string(b))) != 64 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key %q mode %o", b, fi.Mode().Perm())
	}
	if created, err := EnsureBackupAuthKey(dir); err != nil || created {
		t.Fatalf("second: %v %v", created, err)
	}
	if b2, _ := os.ReadFile(p); string(b2) != string(b) {
		t.Error("the key changed")
	}
	host := t.TempDir()
	if err := WriteHost(host, &HostBundle{BackupAuthKey: b}); err != nil {
		t.Fatal(err)
	}
	if hb, _ := os.ReadFile(filepath.Join(host, BackupAuthKey)); string(hb) != string(b) {
		t.Error("WriteHost did not write the key")
	}
	if fi, _ := os.Stat(filepath.Join(host, BackupAuthKey)); fi.Mode().Perm() != 0o600 {
		t.Errorf("host key mode %o", fi.Mode().Perm())
	}
}
