package pki

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Refusals of a certificate directory's files: each names the file, and
// nothing is replaced when one is returned.
var (
	// ErrUnparsable: a certificate or key file holds no PEM certificate or
	// key Steward can read.
	ErrUnparsable = errors.New("the file does not parse")
	// ErrKeyMismatch: a key file does not hold the key of its certificate.
	ErrKeyMismatch = errors.New("the key does not match the certificate")
	// ErrNotSignedByCA: a leaf was not signed by the cluster CA in the
	// same directory.
	ErrNotSignedByCA = errors.New("the certificate was not signed by the cluster CA")
	// ErrUnknownCert: no certificate of that name in the directory.
	ErrUnknownCert = errors.New("no such certificate")
)

// ClientsDir is the subdirectory of the certificate directory holding the
// client certificates issued for the users of etcd (IssueClient).
const ClientsDir = "clients"

// CertInfo describes one certificate: from a file, or as a server presented
// it in a TLS handshake (Endpoint).
type CertInfo struct {
	// Name is the certificate's name in the directory: ca, server, peer,
	// client (the admin's), agent, clients/NAME; for a live one, what
	// served it (member etcd-1 client, member etcd-1 peer, agent h1).
	Name string `json:"name"`
	// File is the file it was read from (empty for a live one).
	File string `json:"file,omitempty"`
	// Endpoint is the address whose TLS handshake presented it.
	Endpoint string `json:"endpoint,omitempty"`
	// Subject is the subject's common name.
	Subject string `json:"subject,omitempty"`
	// SANs are the DNS names and IP addresses it covers.
	SANs []string `json:"sans,omitempty"`
	// Serial is the serial number in hex.
	Serial    string    `json:"serial,omitempty"`
	Issuer    string    `json:"issuer,omitempty"`
	IsCA      bool      `json:"isCA,omitempty"`
	NotBefore time.Time `json:"notBefore,omitzero"`
	NotAfter  time.Time `json:"notAfter,omitzero"`
	// RemainingSeconds is NotAfter minus the time of the listing
	// (negative once expired).
	RemainingSeconds int64 `json:"remainingSeconds"`
	// Error says why the certificate could not be read (a file that does
	// not parse, a handshake that failed); the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// Remaining is the time left at the listing.
func (i CertInfo) Remaining() time.Duration { return time.Duration(i.RemainingSeconds) * time.Second }

// Describe fills a CertInfo from a certificate.
func Describe(name string, c *x509.Certificate, now time.Time) CertInfo {
	i := CertInfo{
		Name: name, Subject: c.Subject.CommonName, Serial: fmt.Sprintf("%x", c.SerialNumber),
		Issuer: c.Issuer.CommonName, IsCA: c.IsCA, NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(),
		RemainingSeconds: int64(c.NotAfter.Sub(now) / time.Second),
	}
	i.SANs = append(i.SANs, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		i.SANs = append(i.SANs, ip.String())
	}
	return i
}

// leaf is a certificate and key pair of a certificate directory.
type leaf struct{ name, cert, key string }

// leaves lists the leaf pairs present in dir: server, peer, client, agent
// and the issued clients, in that order.
func leaves(dir string) ([]leaf, error) {
	var out []leaf
	for _, n := range []string{"server", "peer", "client", "agent"} {
		p := filepath.Join(dir, n+".crt")
		if _, err := os.Stat(p); err == nil {
			out = append(out, leaf{n, p, filepath.Join(dir, n+".key")})
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, ClientsDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".crt"); ok && !e.IsDir() {
			out = append(out, leaf{ClientsDir + "/" + n, filepath.Join(dir, ClientsDir, e.Name()), filepath.Join(dir, ClientsDir, n+".key")})
		}
	}
	return out, nil
}

// Inventory lists every certificate in the certificate directory dir: the
// CA, the server, peer and admin client certificates, a host's agent
// certificate, and the client certificates issued for the users of etcd.
// A file that does not parse is listed with its Error. It reads files
// only; ServedCert reads what a server presents.
func Inventory(dir string) ([]CertInfo, error) {
	now := time.Now()
	ls, err := leaves(dir)
	if err != nil {
		return nil, err
	}
	files := append([]leaf{{"ca", filepath.Join(dir, CACert), ""}}, ls...)
	var out []CertInfo
	for _, f := range files {
		c, err := readCert(f.cert)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			out = append(out, CertInfo{Name: f.name, File: f.cert, Error: err.Error()})
			continue
		}
		i := Describe(f.name, c, now)
		i.File = f.cert
		out = append(out, i)
		if f.name == "ca" {
			// During a CA rotation ca.crt is a bundle of two CAs, and the
			// next CA waits in its own file: list them too.
			out = append(out, moreCAs(dir, now)...)
		}
	}
	return out, nil
}

// moreCAs lists the CAs of a rotation beside the first one of ca.crt: the
// bundle's further certificates (ca#2, ...) and the prepared next CA
// (ca-next), so their expiry is seen (and warned on) too.
func moreCAs(dir string, now time.Time) []CertInfo {
	var out []CertInfo
	if b, err := os.ReadFile(filepath.Join(dir, CACert)); err == nil {
		n := 0
		for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
			n++
			if n == 1 || blk.Type != "CERTIFICATE" {
				continue
			}
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
				i := Describe(fmt.Sprintf("ca#%d", n), c, now)
				i.File = filepath.Join(dir, CACert)
				out = append(out, i)
			}
		}
	}
	if c, err := readCert(filepath.Join(dir, CANextCert)); err == nil {
		i := Describe("ca-next", c, now)
		i.File = filepath.Join(dir, CANextCert)
		out = append(out, i)
	}
	return out
}

// readCert reads the first certificate of a PEM file.
func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: %w: no PEM certificate in it", path, ErrUnparsable)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrUnparsable, err)
	}
	return c, nil
}

// readKey reads an ECDSA private key (SEC 1 or PKCS #8) from a PEM file.
func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s: %w: no PEM key in it", path, ErrUnparsable)
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrUnparsable, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w: not an ECDSA key", path, ErrUnparsable)
	}
	return ek, nil
}

// loadLeaf reads a leaf's certificate and key and checks them: the key is
// the certificate's, and ca signed it. A missing file is os.ErrNotExist;
// otherwise ErrUnparsable, ErrKeyMismatch or ErrNotSignedByCA name the file.
func loadLeaf(certPath, keyPath string, ca *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	c, err := readCert(certPath)
	if err != nil {
		return nil, nil, err
	}
	k, err := readKey(keyPath)
	if err != nil {
		return nil, nil, err
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&k.PublicKey) {
		return nil, nil, fmt.Errorf("%s: %w in %s: put back the key issued with it, or move both aside to have a new pair issued", keyPath, ErrKeyMismatch, certPath)
	}
	if ca != nil {
		if err := c.CheckSignatureFrom(ca); err != nil {
			return nil, nil, fmt.Errorf("%s (issuer %q): %w (%q): put back the certificate the cluster CA issued, or move it and its key aside to have a new pair issued", certPath, c.Issuer.CommonName, ErrNotSignedByCA, ca.Subject.CommonName)
		}
	}
	return c, k, nil
}

// ServedCert returns the certificate the TLS server at addr (host:port)
// presents, checked against the CA pool. client, when set, is presented
// (servers that require a client certificate may close the connection
// after the handshake; the served certificate is read before). A
// certificate the CA did not sign is returned with the verification error.
func ServedCert(ctx context.Context, addr string, pool *x509.CertPool, client *tls.Certificate) (*x509.Certificate, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var got *x509.Certificate
	var verifyErr error
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified below, so that a certificate the CA did not sign is
		// still reported (what a server serves is the point).
		InsecureSkipVerify: true, //nolint:gosec
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			got = cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, verifyErr = got.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return verifyErr
		},
	}
	if client != nil {
		tc.Certificates = []tls.Certificate{*client}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: tc}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if conn != nil {
		conn.Close()
	}
	if got != nil {
		// The server's certificate came: only its verification matters,
		// not what failed after it (a server refusing our client
		// certificate).
		return got, verifyErr
	}
	if err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return nil, fmt.Errorf("TLS handshake with %s: no certificate", addr)
}

// Names lists the names of the leaves in dir (server, peer, client, agent,
// clients/NAME): what a renewal accepts (pkg/certs.RenewDir).
func Names(dir string) ([]string, error) {
	ls, err := leaves(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.name)
	}
	return out, nil
}

func findLeaves(dir string, names []string) ([]leaf, error) {
	ls, err := leaves(dir)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return ls, nil
	}
	var out []leaf
	for _, n := range names {
		i := slices.IndexFunc(ls, func(l leaf) bool { return l.name == n })
		if i < 0 {
			known := make([]string, 0, len(ls))
			for _, l := range ls {
				known = append(known, l.name)
			}
			return nil, fmt.Errorf("%w %q in %s (there: %s)", ErrUnknownCert, n, dir, strings.Join(known, ", "))
		}
		out = append(out, ls[i])
	}
	return out, nil
}

// DescribeFile describes every certificate of a PEM file that is not
// Steward's (an attached cluster's CA bundle and client certificate with
// its chain), reading it only: the first under name, the further ones as
// name#2, name#3, ..., so an intermediate or a second CA that expires first
// is seen too. An unreadable file, or one without a certificate, comes back
// as one CertInfo with its Error set; a block that does not parse is
// listed with its Error beside the others.
func DescribeFile(name, path string, now time.Time) []CertInfo {
	b, err := os.ReadFile(path)
	if err != nil {
		return []CertInfo{{Name: name, File: path, Error: err.Error()}}
	}
	var out []CertInfo
	n := 0
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		if blk.Type != "CERTIFICATE" {
			continue
		}
		n++
		nm := name
		if n > 1 {
			nm = fmt.Sprintf("%s#%d", name, n)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			out = append(out, CertInfo{Name: nm, File: path, Error: fmt.Sprintf("%s: %v: %v", path, ErrUnparsable, err)})
			continue
		}
		i := Describe(nm, c, now)
		i.File = path
		out = append(out, i)
	}
	if n == 0 {
		return []CertInfo{{Name: name, File: path, Error: fmt.Sprintf("%s: %v: no PEM certificate in it", path, ErrUnparsable)}}
	}
	return out
}
