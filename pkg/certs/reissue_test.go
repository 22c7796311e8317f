package certs

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// TestReissue: the coordinator reissues a host's leaf from its certificate
// alone (same public key, subject, names; new serial, the spec's lifetime);
// a leaf of another CA is refused, and so is signing without the CA key.
func TestReissue(t *testing.T) {
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
	cur, err := pki.ParseCertPEM(b.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v := pki.Validity{Leaf: 2 * time.Hour, RenewBefore: 30 * time.Minute}
	pemBytes, nc, err := Reissue(coord, v, cur, now)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := pki.ParseCertPEM(pemBytes); err != nil || p.SerialNumber.Cmp(nc.SerialNumber) != 0 {
		t.Fatalf("PEM and parsed disagree: %v", err)
	}
	if nc.SerialNumber.Cmp(cur.SerialNumber) == 0 || nc.Subject.String() != cur.Subject.String() || !slices.Equal(nc.DNSNames, cur.DNSNames) ||
		len(nc.IPAddresses) != len(cur.IPAddresses) || string(nc.RawSubjectPublicKeyInfo) != string(cur.RawSubjectPublicKeyInfo) {
		t.Errorf("reissued %v %v %v, want the same subject, names and key with a new serial", nc.Subject, nc.DNSNames, nc.IPAddresses)
	}
	if got := nc.NotAfter.Sub(now).Round(time.Minute); got != 2*time.Hour {
		t.Errorf("lifetime %s, want 2h", got)
	}
	if _, err := pki.Install(host, "server", pemBytes, now); err != nil {
		t.Fatalf("install the reissued certificate: %v", err)
	}
	foreign, err := pki.ParseCertFile(filepath.Join(other, pki.ServerCert))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Reissue(coord, v, foreign, now); !errors.Is(err, pki.ErrNotSignedByCA) {
		t.Errorf("a leaf of another CA: %v, want ErrNotSignedByCA", err)
	}
	if _, _, err := Reissue(host, v, cur, now); !errors.Is(err, pki.ErrNoCAKey) {
		t.Errorf("without the CA key: %v, want ErrNoCAKey", err)
	}
}
