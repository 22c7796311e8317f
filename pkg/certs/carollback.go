package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/pki"
)

// The way back from a CA rotation stopped before it dropped the old CA
// (package carotate, plan kind ca-rotation-rollback): every leaf issued by
// the old CA again (RollbackLeaves, RollbackReissueHost), ca.crt the old
// CA alone (RollbackTrustOld), then the next CA moved aside
// (RollbackRetire), after which renewals and issue-client work again.

// ErrOldCADropped: the rotation installed the new CA as ca.key already
// (its drop step began); the old CA is no longer the one Steward signs
// with, and the rotation cannot be rolled back.
var ErrOldCADropped = errors.New("the old CA was dropped (ca.key is the new CA's)")

// rollbackCAs returns the old CA (ca.crt's first certificate, with ca.key)
// and the next CA certificate (nil once retired). A ca.key that is the
// next CA's is ErrOldCADropped.
func rollbackCAs(dir string) (*x509.Certificate, *ecdsa.PrivateKey, *x509.Certificate, error) {
	next, err := pki.ParseCertFile(filepath.Join(dir, pki.CANextCert))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, fmt.Errorf("CA rollback: next CA: %w", err)
	}
	if nextKey, err := pki.ReadKey(filepath.Join(dir, pki.CANextKey)); err == nil {
		if curKey, err := pki.ReadKey(filepath.Join(dir, pki.CAKey)); err == nil && curKey.PublicKey.Equal(&nextKey.PublicKey) {
			return nil, nil, nil, fmt.Errorf("CA rollback: %w", ErrOldCADropped)
		}
	}
	old, oldKey, err := pki.LoadPair(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.CAKey))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA rollback: the old CA (%s, %s): %w", pki.CACert, pki.CAKey, err)
	}
	if next != nil && pki.SamePublicKey(old, next) {
		return nil, nil, nil, fmt.Errorf("CA rollback: %w", ErrOldCADropped)
	}
	return old, oldKey, next, nil
}

// RollbackLeaves makes the leaves named (every leaf when names is empty)
// of dir the old CA's again, keys kept: a leaf the old CA signed is left
// alone (idempotent); otherwise NAME.crt.prev is put back when the old CA
// signed it, it matches the key and is valid at now with its renewal point
// not reached, else the old CA (ca.key) reissues the leaf. The leaf
// replaced (the next CA's) is kept as NAME.crt.prev until ForgetPrevious.
// Every leaf is checked (key matches, signed by the old or the next CA)
// before any is written.
func RollbackLeaves(dir string, v pki.Validity, names []string, now time.Time) ([]pki.Renewal, error) {
	sel, err := rollback(dir, v, now)
	if err != nil {
		return nil, err
	}
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil, fmt.Errorf("CA rollback: %w", err)
	}
	return sel.leaves(ls, now)
}

// restorablePrev returns the certificate file at path (the one a
// rotation's reissue replaced) and its leaf when it can be served again:
// the old CA signed it, it is for key, and it is valid at now with its
// renewal point not reached. Otherwise nil.
func restorablePrev(path string, old *x509.Certificate, key *ecdsa.PrivateKey, v pki.Validity, now time.Time) ([]byte, *x509.Certificate) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	c, chain, err := pki.ParseLeafChainPEM(b)
	if err != nil || len(chain) > 0 || c.CheckSignatureFrom(old) != nil {
		return nil, nil
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil
	}
	if now.Before(c.NotBefore) || !now.Before(c.NotAfter) || v.Due(c, now) {
		return nil, nil
	}
	return b, c
}

// RollbackReissueHost signs, with the old CA of a rotation being rolled
// back in dir (the coordinator's ca.key), the reissue of cert, a leaf of a
// joined host that keeps its key: a leaf alone, no CA after it. done is
// true when the old CA signed cert already (a step re-run). cert must
// otherwise be the next CA's (ErrNotSignedByCA).
func RollbackReissueHost(dir string, v pki.Validity, cert *x509.Certificate, now time.Time) (certPEM []byte, done bool, err error) {
	sel, err := rollback(dir, v, now)
	if err != nil {
		return nil, false, err
	}
	certPEM, _, done, err = sel.leaf(fmt.Sprintf("reissue %q", cert.Subject.CommonName), cert, now)
	return certPEM, done, err
}

// RollbackTrustOld makes ca.crt the old CA alone (replaced in place by one
// atomic rename), once every leaf of dir is the old CA's again (checked
// first: nothing is written otherwise). The same file again changes
// nothing.
func RollbackTrustOld(dir string) error {
	old, _, _, err := rollbackCAs(dir)
	if err != nil {
		return err
	}
	ls, err := pki.FindLeaves(dir, nil)
	if err != nil {
		return fmt.Errorf("CA rollback: %w", err)
	}
	for _, l := range ls {
		c, err := pki.ParseCertFile(l.Cert)
		if err != nil {
			return fmt.Errorf("CA rollback: %s: %w", l.Name, err)
		}
		if c.CheckSignatureFrom(old) != nil {
			return fmt.Errorf("CA rollback: %s (issuer %q): %w (%q): the leaves are reissued from the old CA before it is trusted alone", l.Name, c.Issuer.CommonName, pki.ErrNotSignedByCA, old.Subject.CommonName)
		}
	}
	b := pki.PEM(old.Raw)
	if cur, err := os.ReadFile(filepath.Join(dir, pki.CACert)); err == nil && bytes.Equal(cur, b) {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CACert), b, 0o644); err != nil {
		return fmt.Errorf("CA rollback: write the trust bundle: %w", err)
	}
	return nil
}

// RollbackRetire moves the next CA of a rolled-back rotation aside:
// ca-cross.crt, ca-next.key and, last, ca-next.crt (whose presence is
// RotationInProgress) get the suffix AbortedSuffix + the next CA's serial
// in hex. Nothing is deleted. ca.crt must hold the old CA alone already
// (RollbackTrustOld). Without ca-next.crt it was done (a re-run).
func RollbackRetire(dir string) error {
	next, err := pki.ParseCertFile(filepath.Join(dir, pki.CANextCert))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("CA rollback: next CA: %w", err)
	}
	old, _, _, err := rollbackCAs(dir)
	if err != nil {
		return err
	}
	if cas, err := pki.ReadBundle(filepath.Join(dir, pki.CACert)); err != nil || len(cas) != 1 || !cas[0].Equal(old) {
		return fmt.Errorf("CA rollback: %s does not hold the old CA alone yet: the step that trusts the old CA alone runs first", pki.CACert)
	}
	suffix := pki.AbortedSuffix + next.SerialNumber.Text(16)
	for _, n := range []string{pki.CACross, pki.CANextKey, pki.CANextCert} {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(dir, n+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("CA rollback: move %s aside: %w", n, err)
		}
	}
	return atomicfile.SyncDir(dir)
}

// Unsettled returns, for each leaf named of dir whose NAME.crt.prev is
// still there (a step that wrote it and was killed before it dropped the
// copy), its current certificate as a Renewal: what a re-run waits to see
// served before ForgetPrevious.
func Unsettled(dir string, names []string) ([]pki.Renewal, error) {
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil, err
	}
	var out []pki.Renewal
	for _, l := range ls {
		if _, err := os.Stat(l.Cert + pki.PrevSuffix); err != nil {
			continue
		}
		c, err := pki.ParseCertFile(l.Cert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.Name, err)
		}
		s := fmt.Sprintf("%x", c.SerialNumber)
		out = append(out, pki.Renewal{Name: l.Name, File: l.Cert, OldSerial: s, NewSerial: s, NotAfter: c.NotAfter.UTC()})
	}
	return out, nil
}
