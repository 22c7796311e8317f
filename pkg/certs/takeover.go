package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
)

// Leaf is the subject common name and names (DNS names, IP addresses) of
// a leaf to issue.
type Leaf struct {
	CN    string
	Hosts []string
}

// TakeOverLeaves are the leaves a take-over issues from the operator's CA.
type TakeOverLeaves struct {
	Server, Peer Leaf
}

// ErrOtherCA: the certificate directory holds a CA other than the one
// being imported.
var ErrOtherCA = errors.New("the certificate directory holds another CA")

// ImportCA makes ca the CA of the certificate directory dir (created 0700):
// ca.key (0600) written before ca.crt. A directory that holds this CA
// already is left as it is (a take-over resumed); one that holds another
// is refused (ErrOtherCA).
func ImportCA(dir string, ca *pki.CA) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if have, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert)); err == nil {
		if !bytes.Equal(have.Raw, ca.Cert.Raw) {
			return fmt.Errorf("import CA: %w (%s, %s)", ErrOtherCA, filepath.Join(dir, pki.CACert), have.Subject.CommonName)
		}
		key, err := pki.ReadKey(filepath.Join(dir, pki.CAKey))
		if err == nil && key.Equal(ca.Key) {
			return nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("import CA: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CAKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, pki.CACert), ca.PEM, 0o644); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	return nil
}

// IssueTakeOver issues, from the CA in dir (ImportCA), the server and peer
// certificates l names (server and client usage, as EnsureWith's) and the
// admin client certificate (AdminCN), each with a new key (0600) and
// v.Leaf of lifetime. A leaf already there, signed by the CA, naming at
// least l's names and not due is kept (a take-over resumed).
func IssueTakeOver(dir string, l TakeOverLeaves, v pki.Validity) error {
	v = v.WithDefaults()
	caCert, caKey, err := pki.LoadPair(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.CAKey))
	if err != nil {
		return fmt.Errorf("take-over certificates: CA: %w", err)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, f := range []struct {
		cert, key, cn string
		usage         []x509.ExtKeyUsage
		hosts         []string
	}{
		{pki.ServerCert, pki.ServerKey, l.Server.CN, both, l.Server.Hosts},
		{pki.PeerCert, pki.PeerKey, l.Peer.CN, both, l.Peer.Hosts},
		{pki.ClientCert, pki.ClientKey, pki.AdminCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil},
	} {
		certPath, keyPath := filepath.Join(dir, f.cert), filepath.Join(dir, f.key)
		if c, _, err := pki.LoadLeaf(certPath, keyPath, caCert); err == nil && c.Subject.CommonName == f.cn && pki.Covers(c, f.hosts) && !v.Due(c, time.Now()) {
			continue
		}
		hosts := slices.Clone(f.hosts)
		slices.Sort(hosts)
		der, key, err := pki.Sign(caCert, caKey, nil, f.cn, f.usage, slices.Compact(hosts), v.Leaf)
		if err != nil {
			return fmt.Errorf("take-over certificates: issue %s: %w", f.cert, err)
		}
		if err := pki.WritePair(certPath, keyPath, der, key, true); err != nil {
			return fmt.Errorf("take-over certificates: issue %s: %w", f.cert, err)
		}
	}
	return nil
}

// TakeOver puts the operator's CA (ca, checked by the caller: adopt's
// TakeOverCheck) in charge of the certificate directory of c, under the
// certificate lock (Lock): any certificate set of Steward's own signed by
// another CA is moved aside first (moveAsideOtherCA), the CA imported
// (ImportCA) and the leaves issued from it (IssueTakeOver). Each part
// leaves what is done already as it is, so a take-over resumed redoes
// nothing.
func TakeOver(ctx context.Context, c *cluster.Cluster, ca *pki.CA, leaves TakeOverLeaves, now time.Time) error {
	lock, err := Lock(ctx, c, time.Minute)
	if err != nil {
		return err
	}
	defer lock.Release()
	dir := c.CertDir()
	if err := moveAsideOtherCA(c, dir, ca, now); err != nil {
		return err
	}
	if err := ImportCA(dir, ca); err != nil {
		return err
	}
	if err := IssueTakeOver(dir, leaves, c.Validity()); err != nil {
		return err
	}
	c.Progress.Say("imported the CA %s into %s and issued the server (%s), peer (%s) and admin client certificates from it", ca.Cert.Subject.CommonName, dir, strings.Join(leaves.Server.Hosts, ","), leaves.Peer.CN)
	return nil
}

// moveAsideOtherCA moves a certificate set of Steward's own (a CA other
// than ca, with the leaves it signed) out of the way, into
// pki/before-take-over-TIME/: nothing is deleted.
func moveAsideOtherCA(c *cluster.Cluster, dir string, ca *pki.CA, now time.Time) error {
	b, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if holds, _, _ := ca.Trusts(filepath.Join(dir, pki.CACert)); holds && len(b) > 0 {
		return nil
	}
	aside := filepath.Join(dir, "before-take-over-"+now.UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return err
	}
	for _, f := range []string{pki.CACert, pki.CAKey, pki.ServerCert, pki.ServerKey, pki.PeerCert, pki.PeerKey, pki.ClientCert, pki.ClientKey} {
		if err := os.Rename(filepath.Join(dir, f), filepath.Join(aside, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move Steward's own certificates aside: %w", err)
		}
	}
	c.Progress.Say("moved the certificates of another CA in %s aside into %s", dir, aside)
	return nil
}
