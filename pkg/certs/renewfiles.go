package certs

import (
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// RenewDir reissues leaves of the certificate directory dir with the CA there:
// the leaves named (server, peer, client, agent, clients/NAME), or every
// leaf when names is empty; only those at or past their renewal point
// unless force. A renewed certificate keeps its subject, names, usages and
// key, and gets a new serial and v.Leaf of lifetime; the key file is not
// touched, so the certificate file is the one file that changes, by one
// atomic rename, after the new certificate was checked against the key and
// the CA. The certificate it replaced stays beside it (PrevSuffix) until
// ForgetPrevious.
//
// Every leaf is checked before any is written: a file that does not parse,
// a key that does not match, a leaf the CA did not sign, a missing CA key
// (ErrNoCAKey) or an unknown name is refused and nothing is replaced; so
// is any renewal while a CA rotation runs (ErrRotationInProgress).
func RenewDir(dir string, v pki.Validity, names []string, force bool, now time.Time) ([]pki.Renewal, error) {
	v = v.WithDefaults()
	if err := v.Check(); err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	if pki.RotationInProgress(dir) {
		return nil, fmt.Errorf("renew certificates: %w", pki.ErrRotationInProgress)
	}
	ca, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, fmt.Errorf("renew certificates: CA: %w", err)
	}
	type due struct {
		l    pki.LeafFiles
		cert *x509.Certificate
		key  *ecdsa.PrivateKey
	}
	var todo []due
	for _, l := range ls {
		c, k, err := pki.LoadLeaf(l.Cert, l.Key, ca)
		if err != nil {
			return nil, fmt.Errorf("renew certificates: %s: %w", l.Name, err)
		}
		if force || v.Due(c, now) {
			todo = append(todo, due{l, c, k})
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	caKey, err := pki.ReadKey(filepath.Join(dir, pki.CAKey))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("renew certificates: %w (%s): renew them where the CA key is", pki.ErrNoCAKey, filepath.Join(dir, pki.CAKey))
	}
	if err != nil {
		return nil, fmt.Errorf("renew certificates: CA key: %w", err)
	}
	if pub, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&caKey.PublicKey) {
		return nil, fmt.Errorf("renew certificates: %s: %w in %s", filepath.Join(dir, pki.CAKey), pki.ErrKeyMismatch, filepath.Join(dir, pki.CACert))
	}
	var out []pki.Renewal
	for _, d := range todo {
		der, err := pki.ReissueBy(d.cert, &d.key.PublicKey, ca, caKey, v.Leaf, now)
		if err != nil {
			return out, fmt.Errorf("renew certificates: %s: %w", d.l.Name, err)
		}
		nc, err := x509.ParseCertificate(der)
		if err != nil {
			return out, fmt.Errorf("renew certificates: %s: %w", d.l.Name, err)
		}
		// What etcd will load at its next handshake: checked before it
		// replaces a working certificate.
		if pub, ok := nc.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&d.key.PublicKey) {
			return out, fmt.Errorf("renew certificates: %s: %w", d.l.Name, pki.ErrKeyMismatch)
		}
		if err := nc.CheckSignatureFrom(ca); err != nil {
			return out, fmt.Errorf("renew certificates: %s: %w: %v", d.l.Name, pki.ErrNotSignedByCA, err)
		}
		r, err := pki.ReplaceLeaf(d.l.Name, d.l.Cert, d.cert, nc, pki.PEM(der))
		if err != nil {
			return out, fmt.Errorf("renew certificates: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}
