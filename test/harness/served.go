package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	hp := servedAddr(tb, addr)
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

// servedAddr is addr as host:port: a URL's host and port, or addr itself.
func servedAddr(tb testing.TB, addr string) string {
	tb.Helper()
	if !strings.Contains(addr, "://") {
		return addr
	}
	hp, err := spec.HostPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	return hp
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

// ServedChain does a new TLS handshake with addr (host:port, or a URL),
// presenting client when set, and returns the chain the server presents,
// leaf first, unverified (a server that then refuses the client still
// shows its chain).
func ServedChain(tb testing.TB, addr string, client *tls.Certificate) ([]*x509.Certificate, error) {
	tb.Helper()
	hp := servedAddr(tb, addr)
	var chain []*x509.Certificate
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // what is served is the point
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
	}
	if client != nil {
		tc.Certificates = []tls.Certificate{*client}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: tc}
	ctx, cancel := context.WithTimeout(tb.Context(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", hp)
	if conn != nil {
		conn.Close()
	}
	if len(chain) > 0 {
		return chain, nil
	}
	if err == nil {
		err = fmt.Errorf("no certificate")
	}
	return nil, fmt.Errorf("TLS handshake with %s: %w", hp, err)
}

// RequireOldCARetired fails tb (Errorf) unless the chain addr serves in a
// new handshake is that of a finished CA rotation: no certificate in it
// that oldCA issued (by name or signature: the new CA cross-signed by the
// old one is gone), verified by newCA alone and not by oldCA alone, both in
// Go and by a real `openssl verify` of the served chain saved to files
// (-CAfile the CA alone, the certificates after the leaf -untrusted).
func RequireOldCARetired(tb testing.TB, what, addr string, oldCA, newCA *x509.Certificate) {
	tb.Helper()
	chain, err := ServedChain(tb, addr, nil)
	if err != nil {
		tb.Errorf("%s (%s): %v", what, addr, err)
		return
	}
	for i, c := range chain {
		if bytes.Equal(c.RawIssuer, oldCA.RawSubject) || c.CheckSignatureFrom(oldCA) == nil {
			tb.Errorf("%s (%s) serves, at position %d of its chain, %q (serial %x) issued by the old CA %q", what, addr, i, c.Subject.String(), c.SerialNumber, oldCA.Subject.String())
		}
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	verify := func(ca *x509.Certificate) error {
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	if err := verify(newCA); err != nil {
		tb.Errorf("%s (%s): the new CA alone does not verify the served chain: %v", what, addr, err)
	}
	if verify(oldCA) == nil {
		tb.Errorf("%s (%s): the old CA alone still verifies the served chain (%d certificates)", what, addr, len(chain))
	}
	dir := tb.TempDir()
	write := func(name string, cs ...*x509.Certificate) string {
		var b []byte
		for _, c := range cs {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	leaf := write("served-leaf.pem", chain[0])
	write("served-chain.pem", chain...) // for a look after a failure
	openssl := func(ca string) (string, error) {
		args := []string{"verify", "-CAfile", ca}
		if len(chain) > 1 {
			args = append(args, "-untrusted", write("served-untrusted.pem", chain[1:]...))
		}
		out, err := exec.CommandContext(tb.Context(), "openssl", append(args, leaf)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := openssl(write("old-ca.pem", oldCA)); err == nil {
		tb.Errorf("%s (%s): openssl verify -CAfile old-ca.pem of the served chain succeeded: %s", what, addr, out)
	}
	if out, err := openssl(write("new-ca.pem", newCA)); err != nil {
		tb.Errorf("%s (%s): openssl verify -CAfile new-ca.pem of the served chain failed: %v: %s", what, addr, err, out)
	}
}
