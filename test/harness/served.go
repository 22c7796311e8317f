package harness

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// ServedBy does a new TLS handshake with addr (host:port, or a URL: a
// member's client or peer URL), presenting client when set, and returns
// the certificate the server presents. The error says why it is not one
// that ca signed directly: its chain verified with ca as the only root
// (the server's name and ExtKeyUsageServerAuth checked, as
// pki.ServedCert does) and its signature ca's. A certificate that came is
// returned with the error.
func ServedBy(tb testing.TB, addr string, ca *x509.Certificate, client *tls.Certificate) (*x509.Certificate, error) {
	tb.Helper()
	hp := addr
	if strings.Contains(addr, "://") {
		var err error
		if hp, err = spec.HostPort(addr); err != nil {
			tb.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c, err := pki.ServedCert(tb.Context(), hp, pool, client)
	if err == nil && c.CheckSignatureFrom(ca) != nil {
		err = fmt.Errorf("not signed by the CA %q directly (issuer %q)", ca.Subject.CommonName, c.Issuer.CommonName)
	}
	return c, err
}

// RequireServedBy is ServedBy without a client certificate that fails tb
// (Errorf: the test goes on) naming what and addr when the server does
// not present a certificate ca signed directly; it returns the
// certificate, nil when none came.
func RequireServedBy(tb testing.TB, what, addr string, ca *x509.Certificate) *x509.Certificate {
	tb.Helper()
	c, err := ServedBy(tb, addr, ca, nil)
	if err != nil {
		tb.Errorf("%s (%s) serves %v: %v", what, addr, serial(c), err)
	}
	return c
}

func serial(c *x509.Certificate) string {
	if c == nil {
		return "no certificate"
	}
	return fmt.Sprintf("serial %x", c.SerialNumber)
}

// ReadCert reads the first certificate of a PEM file (a CA file: ca.crt).
func ReadCert(tb testing.TB, path string) *x509.Certificate {
	tb.Helper()
	c, err := pki.ParseCertFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
