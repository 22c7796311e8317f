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

// The one reissue loop. Renewal (RenewDir, Reissue), a CA rotation's
// reissue (RotationReissue, RotationReissueHost) and its rollback
// (RollbackLeaves, RollbackReissueHost) all do "reissue these leaves with
// signer S, keys kept, unless S signed them already"; what differs is the
// selection: which leaves are left alone, which are refused, which CA
// signs and what is served after the leaf. A selection runs over the
// leaves of a certificate directory (leaves) or over one leaf a joined
// host keeps, whose key never leaves it (leaf).

// selection is one kind of reissue.
type selection struct {
	// what begins every error ("renew certificates", "CA rotation").
	what string
	// loadCA, when set, is the CA every leaf of a directory must be
	// signed by as it is read (pki.LoadLeaf refuses another).
	loadCA *x509.Certificate
	// skip reports a leaf left alone: the signer signed it already (a
	// re-run), or it is not due.
	skip func(c *x509.Certificate) bool
	// refuse, when set, returns why leaf c may not be reissued (it wraps
	// pki.ErrNotSignedByCA and reads after the leaf's label, "(issuer
	// ...)..."), or nil. host is true for a joined host's leaf.
	refuse func(c *x509.Certificate, host bool) error
	// signer returns the CA that signs and its key; it is called only
	// once a leaf is to be reissued (a renewal without anything due needs
	// no CA key). host says who to tell to renew where the key is.
	signer func(host bool) (*x509.Certificate, *ecdsa.PrivateKey, error)
	// lifetime is a reissued leaf's (cut at the signer's expiry).
	lifetime time.Duration
	// chain is served after each reissued leaf: the next CA cross-signed
	// by the old one during a rotation, else nothing.
	chain []byte
	// reuse, when set, returns a certificate file to put back instead of
	// a reissue (a rollback's previous copy), or nil.
	reuse func(l pki.LeafFiles, key *ecdsa.PrivateKey) ([]byte, *x509.Certificate)
}

// prefix joins what and label for an error ("CA rotation: server").
func (s selection) prefix(label string) string {
	switch {
	case s.what == "":
		return label
	case label == "":
		return s.what
	}
	return s.what + ": " + label
}

// leaves reissues the leaf pairs ls of a certificate directory: every
// leaf is read and checked first (key matches, loadCA, refuse), and
// nothing is written when one is refused; then each one not skipped is
// reissued (or reused) and written, the previous copy kept beside it
// (pki.ReplaceLeaf).
func (s selection) leaves(ls []pki.LeafFiles, now time.Time) ([]pki.Renewal, error) {
	type due struct {
		l    pki.LeafFiles
		cert *x509.Certificate
		key  *ecdsa.PrivateKey
	}
	var todo []due
	for _, l := range ls {
		c, k, err := pki.LoadLeaf(l.Cert, l.Key, s.loadCA)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", s.what, l.Name, err)
		}
		if s.skip(c) {
			continue
		}
		if s.refuse != nil {
			if err := s.refuse(c, false); err != nil {
				return nil, fmt.Errorf("%s: %s %w", s.what, l.Name, err)
			}
		}
		todo = append(todo, due{l, c, k})
	}
	if len(todo) == 0 {
		return nil, nil
	}
	ca, caKey, err := s.signer(false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.what, err)
	}
	var out []pki.Renewal
	for _, d := range todo {
		var data []byte
		var nc *x509.Certificate
		if s.reuse != nil {
			data, nc = s.reuse(d.l, d.key)
		}
		if data == nil {
			if data, nc, err = s.sign(d.cert, &d.key.PublicKey, ca, caKey, now); err != nil {
				return out, fmt.Errorf("%s: %s: %w", s.what, d.l.Name, err)
			}
		}
		r, err := pki.ReplaceLeaf(d.l.Name, d.l.Cert, d.cert, nc, data)
		if err != nil {
			return out, fmt.Errorf("%s: %w", s.what, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// leaf reissues cert, a leaf a joined host keeps with its key, and returns
// what the host installs (the leaf, then chain) and the new leaf, or done
// when skip leaves it alone. label names it in errors.
func (s selection) leaf(label string, cert *x509.Certificate, now time.Time) (certPEM []byte, nc *x509.Certificate, done bool, err error) {
	name := s.prefix(label)
	if s.skip(cert) {
		return nil, nil, true, nil
	}
	if err := s.refuse(cert, true); err != nil {
		return nil, nil, false, fmt.Errorf("%s %w", name, err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nil, false, fmt.Errorf("%s: %w: not an ECDSA key", name, pki.ErrUnparsable)
	}
	ca, caKey, err := s.signer(true)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", name, err)
	}
	certPEM, nc, err = s.sign(cert, pub, ca, caKey, now)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return certPEM, nc, false, nil
}

// sign is the reissue itself (pki.ReissueBy: subject, names, usages and
// key of cur, a new serial and lifetime), checked before it is written:
// for pub and signed by ca. It returns the leaf's PEM followed by chain.
func (s selection) sign(cur *x509.Certificate, pub *ecdsa.PublicKey, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) ([]byte, *x509.Certificate, error) {
	der, err := pki.ReissueBy(cur, pub, ca, caKey, s.lifetime, now)
	if err != nil {
		return nil, nil, err
	}
	nc, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	// What etcd or the host loads at its next handshake: checked before
	// it replaces a working certificate.
	if got, ok := nc.PublicKey.(*ecdsa.PublicKey); !ok || !got.Equal(pub) {
		return nil, nil, pki.ErrKeyMismatch
	}
	if err := nc.CheckSignatureFrom(ca); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", pki.ErrNotSignedByCA, err)
	}
	return append(pki.PEM(der), s.chain...), nc, nil
}

// renewal is the selection of a renewal by the CA of dir: leaves signed by
// it (refused otherwise), those not due left alone unless force, signed by
// the same CA with its key (pki.ErrNoCAKey without it: only the
// coordinator's directory holds it). what begins its errors.
func renewal(dir, what string, v pki.Validity, force bool, now time.Time) (selection, error) {
	v = v.WithDefaults()
	ca, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return selection{}, fmt.Errorf("%s: CA: %w", what, err)
	}
	return selection{
		what:   what,
		loadCA: ca,
		// A leaf that ends as late as the CA allows is not due either
		// (pki.AtCALimit): renewing it would give no later expiry.
		skip: func(c *x509.Certificate) bool {
			return !force && (!v.Due(c, now) || pki.AtCALimit(c, ca, v.Leaf, now))
		},
		refuse: func(c *x509.Certificate, host bool) error {
			// A directory's leaves were checked against ca as they were
			// read (loadCA).
			if err := c.CheckSignatureFrom(ca); host && (err != nil || c.IsCA) {
				return fmt.Errorf("(issuer %q): %w (%q)", c.Issuer.CommonName, pki.ErrNotSignedByCA, ca.Subject.CommonName)
			}
			return nil
		},
		signer: func(host bool) (*x509.Certificate, *ecdsa.PrivateKey, error) {
			keyFile := filepath.Join(dir, pki.CAKey)
			caKey, err := pki.ReadKey(keyFile)
			if errors.Is(err, os.ErrNotExist) {
				them := "them"
				if host {
					them = "it"
				}
				return nil, nil, fmt.Errorf("%w (%s): renew %s where the CA key is", pki.ErrNoCAKey, keyFile, them)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("CA key: %w", err)
			}
			if pub, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&caKey.PublicKey) {
				return nil, nil, fmt.Errorf("%s: %w in %s", keyFile, pki.ErrKeyMismatch, filepath.Join(dir, pki.CACert))
			}
			return ca, caKey, nil
		},
		lifetime: v.Leaf,
	}, nil
}

// rotation is the selection of a CA rotation's reissue in dir: leaves the
// next CA signed are left alone (a re-run), the others must be the
// current CA's, and the next CA signs them, each served followed by the
// next CA cross-signed by the old one (pki.CACross), so peers trusting the
// old CA only, the new only, or both verify it.
func rotation(dir string, v pki.Validity) (selection, error) {
	v = v.WithDefaults()
	cur, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return selection{}, fmt.Errorf("CA rotation: current CA: %w", err)
	}
	next, nextKey, err := pki.LoadPair(filepath.Join(dir, pki.CANextCert), filepath.Join(dir, pki.CANextKey))
	if errors.Is(err, os.ErrNotExist) {
		return selection{}, fmt.Errorf("CA rotation: %w", ErrNoRotation)
	}
	if err != nil {
		return selection{}, fmt.Errorf("CA rotation: next CA: %w", err)
	}
	cross, err := os.ReadFile(filepath.Join(dir, pki.CACross))
	if err != nil {
		return selection{}, fmt.Errorf("CA rotation: cross-signed CA: %w", err)
	}
	return selection{
		what: "CA rotation",
		skip: func(c *x509.Certificate) bool { return c.CheckSignatureFrom(next) == nil },
		refuse: func(c *x509.Certificate, host bool) error {
			err := c.CheckSignatureFrom(cur)
			switch {
			case host && (err != nil || c.IsCA):
				return fmt.Errorf("(issuer %q): %w (%q)", c.Issuer.CommonName, pki.ErrNotSignedByCA, cur.Subject.CommonName)
			case err != nil:
				return fmt.Errorf("(issuer %q): %w: %v", c.Issuer.CommonName, pki.ErrNotSignedByCA, err)
			}
			return nil
		},
		signer:   func(bool) (*x509.Certificate, *ecdsa.PrivateKey, error) { return next, nextKey, nil },
		lifetime: v.Leaf,
		chain:    cross,
	}, nil
}

// rollback is the selection of a CA rotation's rollback in dir (before the
// drop): leaves the old CA signed are left alone (a re-run), the others
// must be the next CA's, and the old CA signs them again, served alone; a
// directory leaf's previous copy is put back instead when it can be
// (restorablePrev).
func rollback(dir string, v pki.Validity, now time.Time) (selection, error) {
	v = v.WithDefaults()
	old, oldKey, next, err := rollbackCAs(dir)
	if err != nil {
		return selection{}, err
	}
	return selection{
		what: "CA rollback",
		skip: func(c *x509.Certificate) bool { return c.CheckSignatureFrom(old) == nil },
		refuse: func(c *x509.Certificate, host bool) error {
			if next == nil || c.CheckSignatureFrom(next) != nil || (host && c.IsCA) {
				return fmt.Errorf("(issuer %q): %w: signed by neither the old nor the next CA", c.Issuer.CommonName, pki.ErrNotSignedByCA)
			}
			return nil
		},
		signer:   func(bool) (*x509.Certificate, *ecdsa.PrivateKey, error) { return old, oldKey, nil },
		lifetime: v.Leaf,
		reuse: func(l pki.LeafFiles, key *ecdsa.PrivateKey) ([]byte, *x509.Certificate) {
			return restorablePrev(l.Cert+pki.PrevSuffix, old, key, v, now)
		},
	}, nil
}
