package pki

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// A CA rotation of a cluster with joined hosts: the coordinator signs
// the hosts' leaves with the next CA (pkg/certs.RotationReissueHost) and pushes
// them (Install accepts the leaf followed by the cross-signed CA), and
// pushes its trust bundle, ca.crt, to each host (InstallTrustBundle).

// ErrBadTrustBundle: a trust bundle pushed to a host is refused; nothing
// is replaced.
var ErrBadTrustBundle = errors.New("the trust bundle is refused")

// MaxTrustBundle bounds a pushed trust bundle (a handful of CA
// certificates).
const MaxTrustBundle = 64 << 10

// ParseLeafChainPEM parses a certificate file as Steward writes a leaf: the
// leaf, then, during and after a CA rotation, the CA certificates served
// after it (the next CA cross-signed by the old one). Anything after the
// leaf that is not a CA certificate is ErrUnparsable.
func ParseLeafChainPEM(b []byte) (*x509.Certificate, []*x509.Certificate, error) {
	certs, err := parseCertsPEM(b)
	if err != nil {
		return nil, nil, err
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("%w: no PEM certificate in it", ErrUnparsable)
	}
	for _, c := range certs[1:] {
		if !c.IsCA {
			return nil, nil, fmt.Errorf("%w: a certificate after the leaf (%q) is not a CA: send the leaf, then only the CA certificates served with it", ErrUnparsable, c.Subject.CommonName)
		}
	}
	return certs[0], certs[1:], nil
}

// parseCertsPEM parses every block of b, each a certificate.
func parseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: a PEM block of type %q: send certificates only", ErrUnparsable, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnparsable, err)
		}
		out = append(out, c)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%w: something after the PEM certificates", ErrUnparsable)
	}
	return out, nil
}

// readBundle reads every certificate of the trust bundle at path (ca.crt:
// one CA, two during a rotation).
func readBundle(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cs, err := parseCertsPEM(b)
	if err == nil && len(cs) == 0 {
		err = fmt.Errorf("%w: no PEM certificate in it", ErrUnparsable)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// signerIn returns the CA of cas that signed c, or nil.
func signerIn(c *x509.Certificate, cas []*x509.Certificate) *x509.Certificate {
	for _, ca := range cas {
		if c.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// names lists the common names of cas, for errors.
func names(cas []*x509.Certificate) string {
	var out []string
	for _, c := range cas {
		out = append(out, fmt.Sprintf("%q serial %x", c.Subject.CommonName, c.SerialNumber))
	}
	return strings.Join(out, ", ")
}

// TrustBundle says what InstallTrustBundle did.
type TrustBundle struct {
	// File is the bundle's path on the host.
	File string
	// Changed is false when the file held the bundle already.
	Changed bool
	// CAs names the bundle's certificates ("CN serial HEX").
	CAs []string
}

// InstallTrustBundle replaces ca.crt of a joined host's certificate
// directory dir with bundle, the coordinator's ca.crt during a CA rotation
// (old + new, then new alone). Every check comes before anything is
// written (ErrBadTrustBundle, naming what is wrong): the bundle parses,
// holds 1 to 8 CA certificates, each valid at now; every host leaf in dir
// (HostLeafNames) was signed by one of them, so the host's members and
// agent are never left with a leaf their own trust refuses; and caller,
// when given (the certificate that authenticated the request), was signed
// by one of them, so the coordinator is not locked out of the agent.
// The file is then replaced by one atomic rename (0600); the same bundle
// again changes nothing.
func InstallTrustBundle(dir string, bundle []byte, caller *x509.Certificate, now time.Time) (TrustBundle, error) {
	path := filepath.Join(dir, CACert)
	out := TrustBundle{File: path}
	if len(bundle) > MaxTrustBundle {
		return out, fmt.Errorf("%w: larger than %d bytes", ErrBadTrustBundle, MaxTrustBundle)
	}
	cas, err := parseCertsPEM(bundle)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrBadTrustBundle, err)
	}
	if len(cas) == 0 || len(cas) > 8 {
		return out, fmt.Errorf("%w: it holds %d certificates: send 1 to 8 CA certificates (the coordinator's ca.crt)", ErrBadTrustBundle, len(cas))
	}
	for _, c := range cas {
		if !c.IsCA || !c.BasicConstraintsValid {
			return out, fmt.Errorf("%w: %q is not a CA certificate", ErrBadTrustBundle, c.Subject.CommonName)
		}
		if now.Before(c.NotBefore) || !now.Before(c.NotAfter) {
			return out, fmt.Errorf("%w: CA %q serial %x is not valid now (valid %s to %s)", ErrBadTrustBundle, c.Subject.CommonName, c.SerialNumber,
				c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
		}
		out.CAs = append(out.CAs, fmt.Sprintf("%s serial %x", c.Subject.CommonName, c.SerialNumber))
	}
	for _, n := range HostLeafNames {
		p := filepath.Join(dir, n+".crt")
		c, err := readCert(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("%w: this host's %s certificate: %v", ErrBadTrustBundle, n, err)
		}
		if signerIn(c, cas) == nil {
			return out, fmt.Errorf("%w: this host's %s certificate (issuer %q, serial %x) was not signed by a CA of the bundle (%s): reissue the host's leaves from the new CA before dropping the old one",
				ErrBadTrustBundle, n, c.Issuer.CommonName, c.SerialNumber, names(cas))
		}
	}
	if caller != nil && signerIn(caller, cas) == nil {
		return out, fmt.Errorf("%w: the certificate of this request (%q, issuer %q) was not signed by a CA of the bundle (%s): the agent would refuse its coordinator",
			ErrBadTrustBundle, caller.Subject.CommonName, caller.Issuer.CommonName, names(cas))
	}
	var b []byte
	for _, c := range cas {
		b = append(b, pemCert(c.Raw)...)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return out, nil
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return out, fmt.Errorf("install the trust bundle: %w", err)
	}
	out.Changed = true
	return out, nil
}

// trustedKey reports whether CA certificate c carries the key of one of
// cas (another signature of a trusted CA, such as the cross-signed one).
func trustedKey(c *x509.Certificate, cas []*x509.Certificate) bool {
	if !c.IsCA {
		return false
	}
	for _, ca := range cas {
		if samePublicKey(c, ca) && c.Subject.String() == ca.Subject.String() {
			return true
		}
	}
	return false
}
