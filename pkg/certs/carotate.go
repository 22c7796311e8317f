package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/pki"
)

// ErrNoRotation: a rotation step runs, and no new CA was prepared.
var ErrNoRotation = errors.New("no CA rotation in progress (no " + pki.CANextCert + ")")

// RotationPrepare creates the next CA (CANextCert, CANextKey) and its
// certificate cross-signed by the current CA (CACross), unless they are
// there already (idempotent: the next CA of an interrupted rotation is
// kept). The new CA's subject differs from the old one's by its serial
// number attribute, so both can be trusted side by side.
func RotationPrepare(dir, clusterName string, v pki.Validity) error {
	v = v.WithDefaults()
	if err := finishInterruptedDrop(dir); err != nil {
		return err
	}
	oldCert, oldKey, err := pki.LoadPair(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.CAKey))
	if err != nil {
		return fmt.Errorf("CA rotation: current CA: %w", err)
	}
	next, nextKey, err := pki.LoadPair(filepath.Join(dir, pki.CANextCert), filepath.Join(dir, pki.CANextKey))
	if errors.Is(err, os.ErrNotExist) {
		next, nextKey, err = newCAFiles(filepath.Join(dir, pki.CANextCert), filepath.Join(dir, pki.CANextKey), pkix.Name{
			CommonName: clusterName + "-ca", Organization: []string{"steward"},
			SerialNumber: time.Now().UTC().Format("20060102T150405Z"),
		}, v.CA)
	}
	if err != nil {
		return fmt.Errorf("CA rotation: next CA: %w", err)
	}
	if c, err := pki.ParseCertFile(filepath.Join(dir, pki.CACross)); err == nil && c.CheckSignatureFrom(oldCert) == nil && pki.SamePublicKey(c, next) {
		return nil
	}
	notAfter := next.NotAfter
	if notAfter.After(oldCert.NotAfter) {
		notAfter = oldCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          pki.NewSerial(),
		Subject:               next.Subject,
		SubjectKeyId:          next.SubjectKeyId,
		NotBefore:             next.NotBefore,
		NotAfter:              notAfter,
		KeyUsage:              next.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, oldCert, &nextKey.PublicKey, oldKey)
	if err != nil {
		return fmt.Errorf("CA rotation: cross-sign the next CA: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CACross), pki.PEM(der), 0o644); err != nil {
		return fmt.Errorf("CA rotation: %w", err)
	}
	return nil
}

// RotationTrustBoth makes ca.crt the bundle of the current CA and the next
// one (current first, the CA Steward issues with until RotationDrop). The
// file is replaced in place by one atomic rename, so whoever reads it at
// each new connection trusts both from then on.
func RotationTrustBoth(dir string) error {
	cur, _, err := pki.LoadPair(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.CAKey))
	if err != nil {
		return fmt.Errorf("CA rotation: current CA: %w", err)
	}
	next, err := pki.ParseCertFile(filepath.Join(dir, pki.CANextCert))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("CA rotation: %w", ErrNoRotation)
	}
	if err != nil {
		return fmt.Errorf("CA rotation: %w", err)
	}
	b := append(pki.PEM(cur.Raw), pki.PEM(next.Raw)...)
	if old, err := os.ReadFile(filepath.Join(dir, pki.CACert)); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CACert), b, 0o644); err != nil {
		return fmt.Errorf("CA rotation: write the trust bundle: %w", err)
	}
	return nil
}

// RotationReissue reissues the leaves named (Names; every leaf when names
// is empty) from the next CA with their keys kept, each written as the
// leaf followed by the cross-signed next CA (CACross), so peers trusting
// the old CA only, the new only, or both verify it. A leaf the next CA
// already signed is left alone (idempotent). Every leaf is checked (key
// matches, signed by the current or the next CA) before any is written.
func RotationReissue(dir string, v pki.Validity, names []string, now time.Time) ([]pki.Renewal, error) {
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil, fmt.Errorf("CA rotation: %w", err)
	}
	sel, err := rotation(dir, v)
	if err != nil {
		return nil, err
	}
	return sel.leaves(ls, now)
}

// RotationDrop makes the next CA the CA: the old pair is kept as
// CAOldCert and CAOldKey, ca.key becomes the next key and ca.crt the next
// CA alone (the old CA trusted no more), then the next files are removed.
// Each write is atomic and the order makes a re-run after a crash finish
// the work; a rotation already dropped (no CANextCert, ca.crt one
// certificate) is left alone.
func RotationDrop(dir string) error {
	next, nextKey, err := pki.LoadPair(filepath.Join(dir, pki.CANextCert), filepath.Join(dir, pki.CANextKey))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, pki.CAOldCert)); err == nil {
			return nil // dropped already
		}
		return fmt.Errorf("CA rotation: %w", ErrNoRotation)
	}
	if err != nil {
		return fmt.Errorf("CA rotation: next CA: %w", err)
	}
	curKey, err := pki.ReadKey(filepath.Join(dir, pki.CAKey))
	if err != nil {
		return fmt.Errorf("CA rotation: current CA key: %w", err)
	}
	if !curKey.PublicKey.Equal(&nextKey.PublicKey) {
		cur, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
		if err != nil {
			return fmt.Errorf("CA rotation: current CA: %w", err)
		}
		if err := keepOldCA(dir, cur); err != nil {
			return fmt.Errorf("CA rotation: keep an earlier rotation's old CA: %w", err)
		}
		if err := pki.WritePair(filepath.Join(dir, pki.CAOldCert), filepath.Join(dir, pki.CAOldKey), cur.Raw, curKey, true); err != nil {
			return fmt.Errorf("CA rotation: keep the old CA: %w", err)
		}
		if err := atomicfile.SyncDir(dir); err != nil {
			return fmt.Errorf("CA rotation: %w", err)
		}
		kb, err := os.ReadFile(filepath.Join(dir, pki.CANextKey))
		if err != nil {
			return fmt.Errorf("CA rotation: %w", err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, pki.CAKey), kb, 0o600); err != nil {
			return fmt.Errorf("CA rotation: install the new CA key: %w", err)
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CACert), pki.PEM(next.Raw), 0o644); err != nil {
		return fmt.Errorf("CA rotation: install the new CA: %w", err)
	}
	for _, n := range []string{pki.CANextCert, pki.CANextKey} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("CA rotation: %w", err)
		}
	}
	return atomicfile.SyncDir(dir)
}

// finishInterruptedDrop finishes a RotationDrop that stopped after it
// installed the next CA's key as ca.key and before it wrote ca.crt (a
// crash, then `plan abort` instead of `plan resume`): ca.key no longer
// matches the bundle's first certificate, which no other step could load.
// Anything else is left alone.
func finishInterruptedDrop(dir string) error {
	nextKey, err := pki.ReadKey(filepath.Join(dir, pki.CANextKey))
	if err != nil {
		return nil // no rotation prepared (or unreadable: the caller says)
	}
	curKey, err := pki.ReadKey(filepath.Join(dir, pki.CAKey))
	if err != nil || !curKey.PublicKey.Equal(&nextKey.PublicKey) {
		return nil
	}
	if err := RotationDrop(dir); err != nil {
		return fmt.Errorf("CA rotation: finish the interrupted drop of the old CA: %w", err)
	}
	return nil
}

// keepOldCA moves a CAOldCert and CAOldKey of an earlier rotation aside
// (suffixed with the old certificate's serial) before a later rotation
// keeps its own old CA there: Steward never deletes a CA.
func keepOldCA(dir string, cur *x509.Certificate) error {
	prev, err := pki.ParseCertFile(filepath.Join(dir, pki.CAOldCert))
	if err != nil || prev.Equal(cur) {
		return nil // none, or this rotation's own (a re-run)
	}
	suffix := "." + prev.SerialNumber.Text(16)
	for _, n := range []string{pki.CAOldCert, pki.CAOldKey} {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(dir, n+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return atomicfile.SyncDir(dir)
}

// newCAFiles creates a self-signed CA with subject name and writes it to
// certPath and keyPath (key 0600).
func newCAFiles(certPath, keyPath string, name pkix.Name, lifetime time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          pki.NewSerial(),
		Subject:               name,
		NotBefore:             time.Now().Add(-pki.Backdate(lifetime)),
		NotAfter:              time.Now().Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := pki.WritePair(certPath, keyPath, der, key, true); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// ErrOldCANotDropped: the cross-signed CA is retired only once the rotation
// made the new CA the CA (RotationDrop); nothing is changed.
var ErrOldCANotDropped = errors.New("the old CA is not dropped yet (" + pki.CANextCert + " exists): the cross-signed CA stays served until the rotation's drop and restarts are done")

// RotationRetireCross ends a CA rotation, once every member was restarted
// trusting the new CA alone: each leaf of dir (server, peer, client, agent,
// clients/NAME) written as the leaf followed by CA certificates (the new CA
// cross-signed by the old one, RotationReissue) is rewritten as the leaf
// alone, as a fresh cluster's leaves are, so that whoever trusts only the
// old CA verifies them no more. The leaf and its key do not change: each
// file is replaced by one atomic rename, and etcd and the agent read their
// certificate file at every handshake. Every leaf is checked first (no
// rotation in progress: ErrOldCANotDropped; the leaf signed by a CA of
// ca.crt: ErrNotSignedByCA) and nothing is written on a refusal. A leaf
// already alone is left as it is, so a re-run after a crash finishes the
// work. It returns the names of the files rewritten.
func RotationRetireCross(dir string) ([]string, error) {
	if pki.RotationInProgress(dir) {
		return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", ErrOldCANotDropped)
	}
	cas, err := pki.ReadBundle(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", err)
	}
	ls, err := pki.FindLeaves(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", err)
	}
	type due struct {
		l    pki.LeafFiles
		cert *x509.Certificate
	}
	var todo []due
	for _, l := range ls {
		b, err := os.ReadFile(l.Cert)
		if err != nil {
			return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %w", err)
		}
		c, chain, err := pki.ParseLeafChainPEM(b)
		if err != nil {
			return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %s: %w", l.Cert, err)
		}
		if len(chain) == 0 {
			continue
		}
		if pki.SignerIn(c, cas) == nil {
			return nil, fmt.Errorf("CA rotation: retire the cross-signed CA: %s (issuer %q): %w (%s)", l.Cert, c.Issuer.CommonName, pki.ErrNotSignedByCA, pki.CANames(cas))
		}
		todo = append(todo, due{l, c})
	}
	var out []string
	for _, d := range todo {
		if err := atomicfile.WriteFile(d.l.Cert, pki.PEM(d.cert.Raw), 0o644); err != nil {
			return out, fmt.Errorf("CA rotation: retire the cross-signed CA: write %s: %w", d.l.Name, err)
		}
		out = append(out, d.l.Name)
	}
	return out, nil
}
