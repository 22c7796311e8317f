package certs

import (
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// Reissue signs, with the CA of the certificate directory dir, a renewal of
// cert: a leaf of another host, which keeps its key (the host holds it).
// The renewal keeps cert's subject, names, usages and public key, and gets
// a new serial and v.Leaf of lifetime (cut at the CA's). cert must be a
// leaf the CA signed (ErrNotSignedByCA otherwise); without the CA key it is
// ErrNoCAKey. It returns the renewal PEM-encoded and parsed.
func Reissue(dir string, v pki.Validity, cert *x509.Certificate, now time.Time) ([]byte, *x509.Certificate, error) {
	sel, err := renewal(dir, fmt.Sprintf("reissue %q", cert.Subject.CommonName), v, true, now)
	if err != nil {
		return nil, nil, err
	}
	certPEM, nc, _, err := sel.leaf("", cert, now)
	return certPEM, nc, err
}

// RotationReissueHost signs, with the next CA of a rotation in dir (the
// coordinator's), the reissue of cert, a leaf of a joined host that keeps
// its key. It returns the leaf followed by the cross-signed next CA (what
// the host installs and serves), or done when the next CA signed cert
// already (a step re-run). cert must otherwise be signed by the current CA
// (ErrNotSignedByCA).
func RotationReissueHost(dir string, v pki.Validity, cert *x509.Certificate, now time.Time) (certPEM []byte, nc *x509.Certificate, done bool, err error) {
	sel, err := rotation(dir, v)
	if err != nil {
		return nil, nil, false, err
	}
	return sel.leaf(fmt.Sprintf("reissue %q", cert.Subject.CommonName), cert, now)
}

// RotationRetireCrossHost is RotationRetireCross for a leaf of a joined
// host: cur, followed on the host by the CA certificates chain, becomes cur
// alone. It returns the PEM the host installs (PUT /v1/certs/NAME: the same
// leaf, its key unchanged), or done when chain is empty (a re-run). It
// refuses while the rotation in dir (the coordinator's) has not dropped the
// old CA (ErrOldCANotDropped), and a leaf the CA of dir's ca.crt did not
// sign (ErrNotSignedByCA).
func RotationRetireCrossHost(dir string, cur *x509.Certificate, chain []*x509.Certificate) (certPEM []byte, done bool, err error) {
	if len(chain) == 0 {
		return nil, true, nil
	}
	if pki.RotationInProgress(dir) {
		return nil, false, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", ErrOldCANotDropped)
	}
	cas, err := pki.ReadBundle(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, false, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", err)
	}
	if pki.SignerIn(cur, cas) == nil || cur.IsCA {
		return nil, false, fmt.Errorf("CA rotation: retire the cross-signed CA: %q (issuer %q): %w (%s)", cur.Subject.CommonName, cur.Issuer.CommonName, pki.ErrNotSignedByCA, pki.CANames(cas))
	}
	return pki.PEM(cur.Raw), false, nil
}
