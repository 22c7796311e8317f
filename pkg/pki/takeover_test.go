package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

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

// TestLoadCA: the operator's CA loads when the key is the certificate's;
// another CA's key, a certificate that is no CA, a file of two
// certificates and an RSA key are refused, each with its sentinel.
func TestLoadCA(t *testing.T) {
	dir := t.TempDir()
	cp, kp, cert, _ := operatorCA(t, dir, true)
	ca, err := LoadCA(cp, kp)
	if err != nil || !ca.Cert.Equal(cert) {
		t.Fatalf("LoadCA = %v, %v", ca, err)
	}
	_, otherKey, _, _ := operatorCA(t, t.TempDir(), true)
	leafCert, leafKey, _, _ := operatorCA(t, t.TempDir(), false)
	both := filepath.Join(dir, "both.pem")
	b1, _ := os.ReadFile(cp)
	b2, _ := os.ReadFile(leafCert)
	write(t, both, string(b1)+string(b2))
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rtmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rsa-ca"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rder, _ := x509.CreateCertificate(rand.Reader, rtmpl, rtmpl, &rk.PublicKey, rk)
	rsaCert, rsaKey := filepath.Join(dir, "rsa.pem"), filepath.Join(dir, "rsa-key.pem")
	write(t, rsaCert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rder})))
	write(t, rsaKey, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})))
	for _, tc := range []struct {
		name, cert, key string
		want            error
	}{
		{"another CA's key", cp, otherKey, ErrKeyMismatch},
		{"not a CA", leafCert, leafKey, ErrNotCA},
		{"two certificates", both, kp, ErrNotCA},
		{"an RSA key", rsaCert, rsaKey, ErrKeyType},
	} {
		if _, err := LoadCA(tc.cert, tc.key); !errors.Is(err, tc.want) {
			t.Errorf("%s: LoadCA = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestCATrustsAndSigned: Signed names a certificate of another CA; Trusts
// counts the other certificates of a bundle.
func TestCATrustsAndSigned(t *testing.T) {
	dir := t.TempDir()
	cp, kp, _, _ := operatorCA(t, dir, true)
	ca, err := LoadCA(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, _, _, _ := operatorCA(t, t.TempDir(), true)
	if err := ca.Signed(cp); err != nil {
		t.Errorf("the CA signed itself: %v", err)
	}
	if err := ca.Signed(otherCert); !errors.Is(err, ErrNotSignedByCA) {
		t.Errorf("Signed(another CA's) = %v", err)
	}
	b1, _ := os.ReadFile(cp)
	b2, _ := os.ReadFile(otherCert)
	bundle := filepath.Join(dir, "bundle.pem")
	write(t, bundle, string(b1)+string(b2))
	if holds, others, err := ca.Trusts(bundle); !holds || others != 1 || err != nil {
		t.Errorf("Trusts(bundle) = %v, %d, %v; want true, 1", holds, others, err)
	}
	if holds, others, err := ca.Trusts(otherCert); holds || others != 1 || err != nil {
		t.Errorf("Trusts(another CA) = %v, %d, %v; want false, 1", holds, others, err)
	}
}
