package backup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// An S3 server with a private CA: backup.s3.caFile names a PEM bundle of
// CA certificates, and an S3 store trusts exactly those (instead of the
// system roots, as the AWS CLI's --ca-bundle does).
//
// Invariants enforced here:
//   - a CA bundle is every PEM block a CERTIFICATE that x509 parses, and at
//     least one (ParseCABundle): a key, a truncated block or stray bytes
//     between blocks are refused, never skipped;
//   - CheckS3Server verifies the server's certificate chain and name
//     against the bundle alone, with the same TLS settings the store uses.

// MaxCABundle bounds a CA bundle (read from disk or from a coordinator).
const MaxCABundle = 512 << 10

var (
	// ErrS3CA: the CA bundle does not verify the S3 server (unknown
	// authority, name mismatch, expired), or is not a bundle of
	// certificates (missing, unreadable, not PEM).
	ErrS3CA = errors.New("the S3 CA file does not verify the S3 server")
	// ErrS3Unreachable: the S3 server could not be reached to check its
	// certificate.
	ErrS3Unreachable = errors.New("S3 server unreachable")
)

// ParseCABundle parses a PEM bundle of CA certificates. Every PEM block
// must be a CERTIFICATE that parses, there must be at least one, and
// nothing but white space may sit between or around the blocks.
func ParseCABundle(b []byte) ([]*x509.Certificate, error) {
	if len(b) > MaxCABundle {
		return nil, fmt.Errorf("%d bytes: a CA bundle is at most %d", len(b), MaxCABundle)
	}
	var certs []*x509.Certificate
	rest := b
	for {
		if len(strings.TrimSpace(string(rest))) == 0 {
			break
		}
		blk, r := pem.Decode(rest)
		if blk == nil {
			if len(certs) == 0 {
				return nil, errors.New("not PEM: want one or more -----BEGIN CERTIFICATE----- blocks")
			}
			return nil, fmt.Errorf("bytes after certificate %d are not PEM", len(certs))
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("block %d is a %s, not a CERTIFICATE", len(certs)+1, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
		rest = r
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no certificate")
	}
	return certs, nil
}

// LoadCABundle reads and parses the CA bundle in file (ParseCABundle) into
// a pool; its errors wrap ErrS3CA and name the file.
func LoadCABundle(file string) (*x509.CertPool, error) {
	b, err := readCABundle(file)
	if err != nil {
		return nil, err
	}
	certs, err := ParseCABundle(b)
	if err != nil {
		return nil, caError(ErrS3CA, "S3 CA file %s: %v", file, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

func readCABundle(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, caError(ErrS3CA, "S3 CA file %s: %v", file, errors.Unwrap(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCABundle+1))
	if err != nil {
		return nil, caError(ErrS3CA, "S3 CA file %s: %v", file, err)
	}
	return b, nil
}

// s3TLSConfig is the TLS configuration of a store whose server has a
// private CA: the bundle's certificates are its only roots.
func s3TLSConfig(pool *x509.CertPool) *tls.Config {
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// CheckS3Server checks that the CA bundle in caFile verifies the S3 server
// at endpoint (https://host[:port]): a TLS handshake with the bundle as the
// only roots. A bundle that is missing, unreadable or not PEM
// certificates, a certificate chain it does not verify (unknown
// authority), a certificate for another name (name mismatch) or out of its
// validity, and a server that does not speak TLS fail with ErrS3CA naming
// the file, the endpoint and what failed; a server that cannot be reached
// within timeout fails with ErrS3Unreachable.
func CheckS3Server(ctx context.Context, endpoint, caFile string, timeout time.Duration) error {
	pool, err := LoadCABundle(caFile)
	if err != nil {
		return caError(ErrS3CA, "%v: it cannot verify the S3 server %s", err, endpoint)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("s3 endpoint %q: want https://host[:port]", endpoint)
	}
	if u.Scheme != "https" {
		return caError(ErrS3CA, "S3 CA file %s is set, but the endpoint %s is not https://: use https, or drop the CA file", caFile, endpoint)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return caError(ErrS3Unreachable, "check S3 CA file %s against %s: %v", caFile, endpoint, err)
	}
	defer raw.Close()
	cfg := s3TLSConfig(pool)
	cfg.ServerName = u.Hostname()
	conn := tls.Client(raw, cfg)
	err = conn.HandshakeContext(ctx)
	if err == nil {
		return nil
	}
	what := err.Error()
	var (
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		inv x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &ua):
		what = "unknown authority: the server's certificate"
		if ua.Cert != nil {
			what += fmt.Sprintf(" (%s, issued by %s)", ua.Cert.Subject, ua.Cert.Issuer)
		}
		what += " is not signed by a CA in the file"
	case errors.As(err, &hn):
		what = fmt.Sprintf("name mismatch: the server's certificate is valid for %s, not %s", certNames(hn.Certificate), hn.Host)
	case errors.As(err, &inv):
		what = "the server's certificate is invalid: " + inv.Error()
	case ctx.Err() != nil:
		return caError(ErrS3Unreachable, "check S3 CA file %s against %s: no TLS handshake within %s", caFile, endpoint, timeout)
	default:
		what = "TLS handshake failed (does the server speak https?): " + what
	}
	return caError(ErrS3CA, "S3 CA file %s does not verify the S3 server %s: %s", caFile, endpoint, what)
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no name"
	}
	names := append([]string{}, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no name (subject " + c.Subject.String() + ")"
	}
	return strings.Join(names, ", ")
}

// s3CAError is an error of CheckS3Server or LoadCABundle: its message
// alone, matching its kind (ErrS3CA, ErrS3Unreachable) with errors.Is.
type s3CAError struct {
	kind error
	msg  string
}

func caError(kind error, format string, args ...any) error {
	return &s3CAError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func (e *s3CAError) Error() string        { return e.msg }
func (e *s3CAError) Is(target error) bool { return target == e.kind }
