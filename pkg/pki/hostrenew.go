package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// HostLeafNames are the leaves of a joined host's certificate directory
// (WriteHost) that the coordinator renews over the host agent's API: the
// members' server and peer certificates, the agent's own and the host's
// client certificate. The host keeps their keys; only certificates travel.
var HostLeafNames = []string{"server", "peer", "agent", "client"}

// Refusals of a certificate pushed to a host (Install); nothing is replaced.
var (
	// ErrNotSameLeaf: the certificate is not a renewal of the leaf it
	// is meant to replace (another subject).
	ErrNotSameLeaf = errors.New("the certificate is not a renewal of this leaf")
	// ErrNotValidNow: the certificate has expired or is not valid yet.
	ErrNotValidNow = errors.New("the certificate is not valid now")
)

// MaxCertPEM bounds a pushed certificate (one PEM certificate is about a
// kilobyte).
const MaxCertPEM = 64 << 10

// ParseCertPEM parses exactly one PEM certificate.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM certificate in it", ErrUnparsable)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%w: more than one PEM block: send the one certificate", ErrUnparsable)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnparsable, err)
	}
	return c, nil
}

// HostLeafPath returns the certificate file of a host leaf (HostLeafNames)
// in dir, or ErrUnknownCert for any other name.
func HostLeafPath(dir, name string) (string, error) {
	if !slices.Contains(HostLeafNames, name) {
		return "", fmt.Errorf("%w %q: a host's certificates are %s", ErrUnknownCert, name, strings.Join(HostLeafNames, ", "))
	}
	return filepath.Join(dir, name+".crt"), nil
}

// Install replaces the host leaf name (HostLeafNames) of the certificate
// directory dir with certPEM, a renewal the coordinator signed (pkg/certs.Reissue).
// Every check comes before anything is written: the certificate parses
// (ErrUnparsable), is for the key already in NAME.key (ErrKeyMismatch),
// has the subject of the certificate it replaces (ErrNotSameLeaf), was
// signed by a CA of the bundle in dir (ErrNotSignedByCA; during a CA
// rotation, the next CA, followed by that CA cross-signed by the old one,
// the only CA certificates accepted after the leaf) and is valid at now
// (ErrNotValidNow). Then, as a renewal does (pkg/certs.RenewDir), the current certificate is kept
// as NAME.crt.prev and NAME.crt replaced by one atomic rename; the key
// file is not touched. ForgetPrevious drops the copy once the new serial
// is served.
func Install(dir, name string, certPEM []byte, now time.Time) (Renewal, error) {
	certPath, err := HostLeafPath(dir, name)
	if err != nil {
		return Renewal{}, err
	}
	cas, err := readBundle(filepath.Join(dir, CACert))
	if err != nil {
		return Renewal{}, fmt.Errorf("install %s: CA: %w", name, err)
	}
	cur, key, err := loadLeaf(certPath, filepath.Join(dir, name+".key"), nil)
	if err == nil && signerIn(cur, cas) == nil {
		err = fmt.Errorf("%s (issuer %q): %w (%s)", certPath, cur.Issuer.CommonName, ErrNotSignedByCA, names(cas))
	}
	if err != nil {
		return Renewal{}, fmt.Errorf("install %s: the current certificate: %w", name, err)
	}
	nc, chain, err := ParseLeafChainPEM(certPEM)
	if err != nil {
		return Renewal{}, fmt.Errorf("install %s: the certificate sent: %w", name, err)
	}
	if pub, ok := nc.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return Renewal{}, fmt.Errorf("install %s: the certificate sent: %w in %s: a renewal keeps the host's key; reissue it from the certificate this host serves",
			name, ErrKeyMismatch, filepath.Join(dir, name+".key"))
	}
	if nc.Subject.String() != cur.Subject.String() || nc.IsCA {
		return Renewal{}, fmt.Errorf("install %s: the certificate sent (subject %q): %w (subject %q)", name, nc.Subject.String(), ErrNotSameLeaf, cur.Subject.String())
	}
	if signerIn(nc, cas) == nil {
		return Renewal{}, fmt.Errorf("install %s: the certificate sent (issuer %q): %w (%s)", name, nc.Issuer.CommonName, ErrNotSignedByCA, names(cas))
	}
	// The CA certificates served after the leaf (a rotation's cross-signed
	// CA) may only be another signature of a CA this host trusts.
	for _, c := range chain {
		if !trustedKey(c, cas) {
			return Renewal{}, fmt.Errorf("install %s: the CA certificate sent after the leaf (%q): %w: it is none of this host's CAs (%s)", name, c.Subject.CommonName, ErrNotSignedByCA, names(cas))
		}
	}
	if now.Before(nc.NotBefore) || !now.Before(nc.NotAfter) {
		return Renewal{}, fmt.Errorf("install %s: the certificate sent: %w (valid %s to %s, now %s)", name, ErrNotValidNow,
			nc.NotBefore.UTC().Format(time.RFC3339), nc.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	data := pemCert(nc.Raw)
	for _, c := range chain {
		data = append(data, pemCert(c.Raw)...)
	}
	r, err := replaceLeaf(name, certPath, cur, nc, data)
	if err != nil {
		return Renewal{}, fmt.Errorf("install %s: %w", name, err)
	}
	return r, nil
}
