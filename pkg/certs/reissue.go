package certs

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
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
	v = v.WithDefaults()
	ca, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, nil, fmt.Errorf("reissue %q: CA: %w", cert.Subject.CommonName, err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil || cert.IsCA {
		return nil, nil, fmt.Errorf("reissue %q (issuer %q): %w (%q)", cert.Subject.CommonName, cert.Issuer.CommonName, pki.ErrNotSignedByCA, ca.Subject.CommonName)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nil, fmt.Errorf("reissue %q: %w: not an ECDSA key", cert.Subject.CommonName, pki.ErrUnparsable)
	}
	caKey, err := pki.ReadKey(filepath.Join(dir, pki.CAKey))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("reissue %q: %w (%s): renew it where the CA key is", cert.Subject.CommonName, pki.ErrNoCAKey, filepath.Join(dir, pki.CAKey))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reissue %q: CA key: %w", cert.Subject.CommonName, err)
	}
	der, err := pki.ReissueBy(cert, pub, ca, caKey, v.Leaf, now)
	if err != nil {
		return nil, nil, fmt.Errorf("reissue %q: %w", cert.Subject.CommonName, err)
	}
	nc, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("reissue %q: %w", cert.Subject.CommonName, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nc, nil
}

// RotationReissueHost signs, with the next CA of a rotation in dir (the
// coordinator's), the reissue of cert, a leaf of a joined host that keeps
// its key. It returns the leaf followed by the cross-signed next CA (what
// the host installs and serves), or done when the next CA signed cert
// already (a step re-run). cert must otherwise be signed by the current CA
// (ErrNotSignedByCA).
func RotationReissueHost(dir string, v pki.Validity, cert *x509.Certificate, now time.Time) (certPEM []byte, nc *x509.Certificate, done bool, err error) {
	v = v.WithDefaults()
	next, nextKey, err := pki.LoadPair(filepath.Join(dir, pki.CANextCert), filepath.Join(dir, pki.CANextKey))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, false, fmt.Errorf("CA rotation: %w", ErrNoRotation)
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("CA rotation: next CA: %w", err)
	}
	if cert.CheckSignatureFrom(next) == nil {
		return nil, nil, true, nil
	}
	cur, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, nil, false, fmt.Errorf("CA rotation: current CA: %w", err)
	}
	if err := cert.CheckSignatureFrom(cur); err != nil || cert.IsCA {
		return nil, nil, false, fmt.Errorf("CA rotation: reissue %q (issuer %q): %w (%q)", cert.Subject.CommonName, cert.Issuer.CommonName, pki.ErrNotSignedByCA, cur.Subject.CommonName)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nil, false, fmt.Errorf("CA rotation: reissue %q: %w: not an ECDSA key", cert.Subject.CommonName, pki.ErrUnparsable)
	}
	cross, err := os.ReadFile(filepath.Join(dir, pki.CACross))
	if err != nil {
		return nil, nil, false, fmt.Errorf("CA rotation: cross-signed CA: %w", err)
	}
	der, err := pki.ReissueBy(cert, pub, next, nextKey, v.Leaf, now)
	if err != nil {
		return nil, nil, false, fmt.Errorf("CA rotation: reissue %q: %w", cert.Subject.CommonName, err)
	}
	nc, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, false, fmt.Errorf("CA rotation: reissue %q: %w", cert.Subject.CommonName, err)
	}
	return append(pki.PEM(der), cross...), nc, false, nil
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
