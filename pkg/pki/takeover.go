package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// Refusals of a certificate take-over's CA (LoadCA).
var (
	// ErrNotCA: the certificate given as the CA is not one (no CA basic
	// constraint, or it may not sign certificates), or the file holds
	// more or less than one certificate.
	ErrNotCA = errors.New("not a CA certificate")
	// ErrKeyType: the CA key is not an ECDSA key, the one kind Steward
	// issues and renews with.
	ErrKeyType = errors.New("the CA key is not an ECDSA key")
)

// CA is a CA certificate with its key, as given for a take-over.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the certificate, PEM-encoded.
	PEM []byte
}

// LoadCA reads a CA certificate file (exactly one certificate) and its key
// file (PEM, SEC 1 or PKCS #8): the key must be the certificate's
// (ErrKeyMismatch), an ECDSA key (ErrKeyType), and the certificate a CA
// (ErrNotCA).
func LoadCA(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	var certs []*pem.Block
	for rest := cb; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			certs = append(certs, b)
		}
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%s: %w: it holds %d certificates, want the one CA whose key is given", certFile, ErrNotCA, len(certs))
	}
	cert, err := x509.ParseCertificate(certs[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", certFile, ErrUnparsable, err)
	}
	if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("%s (%s): %w: it may not sign certificates", certFile, cert.Subject.CommonName, ErrNotCA)
	}
	pemCert := pem.EncodeToMemory(certs[0])
	pair, err := tls.X509KeyPair(pemCert, kb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w in %s (%v)", keyFile, ErrKeyMismatch, certFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w (it is %T): Steward issues and renews with ECDSA keys only", keyFile, ErrKeyType, pair.PrivateKey)
	}
	return &CA{Cert: cert, Key: key, PEM: pemCert}, nil
}

// Signed reports whether the CA signed the first certificate of a PEM
// file, with an error saying why not.
func (ca *CA) Signed(certFile string) error {
	c, err := readCert(certFile)
	if err != nil {
		return err
	}
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("%s (%s): %w %s: %v", certFile, c.Subject.CommonName, ErrNotSignedByCA, ca.Cert.Subject.CommonName, err)
	}
	return nil
}

// Trusts reports whether a CA bundle file holds this CA and nothing else.
func (ca *CA) Trusts(bundleFile string) (holds bool, others int, err error) {
	b, err := os.ReadFile(bundleFile)
	if err != nil {
		return false, 0, err
	}
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if bytes.Equal(blk.Bytes, ca.Cert.Raw) {
			holds = true
		} else {
			others++
		}
	}
	return holds, others, nil
}

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
func ImportCA(dir string, ca *CA) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if have, err := readCert(filepath.Join(dir, CACert)); err == nil {
		if !bytes.Equal(have.Raw, ca.Cert.Raw) {
			return fmt.Errorf("import CA: %w (%s, %s)", ErrOtherCA, filepath.Join(dir, CACert), have.Subject.CommonName)
		}
		key, err := readKey(filepath.Join(dir, CAKey))
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
	if err := atomicfile.WriteFile(filepath.Join(dir, CAKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CACert), ca.PEM, 0o644); err != nil {
		return fmt.Errorf("import CA: %w", err)
	}
	return nil
}

// IssueTakeOver issues, from the CA in dir (ImportCA), the server and peer
// certificates l names (server and client usage, as EnsureWith's) and the
// admin client certificate (AdminCN), each with a new key (0600) and
// v.Leaf of lifetime. A leaf already there, signed by the CA, naming at
// least l's names and not due is kept (a take-over resumed).
func IssueTakeOver(dir string, l TakeOverLeaves, v Validity) error {
	v = v.WithDefaults()
	caCert, caKey, err := loadPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		return fmt.Errorf("take-over certificates: CA: %w", err)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	for _, f := range []struct {
		cert, key, cn string
		usage         []x509.ExtKeyUsage
		hosts         []string
	}{
		{ServerCert, ServerKey, l.Server.CN, both, l.Server.Hosts},
		{PeerCert, PeerKey, l.Peer.CN, both, l.Peer.Hosts},
		{ClientCert, ClientKey, AdminCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil},
	} {
		certPath, keyPath := filepath.Join(dir, f.cert), filepath.Join(dir, f.key)
		if c, _, err := loadLeaf(certPath, keyPath, caCert); err == nil && c.Subject.CommonName == f.cn && covers(c, f.hosts) && !v.Due(c, time.Now()) {
			continue
		}
		hosts := slices.Clone(f.hosts)
		slices.Sort(hosts)
		der, key, err := sign(caCert, caKey, nil, f.cn, f.usage, slices.Compact(hosts), v.Leaf)
		if err != nil {
			return fmt.Errorf("take-over certificates: issue %s: %w", f.cert, err)
		}
		if err := writePair(certPath, keyPath, der, key, true); err != nil {
			return fmt.Errorf("take-over certificates: issue %s: %w", f.cert, err)
		}
	}
	return nil
}

// CertNames returns the DNS names and IP addresses a certificate file's first
// certificate names, and its subject common name.
func CertNames(certFile string) (cn string, hosts []string, err error) {
	c, err := readCert(certFile)
	if err != nil {
		return "", nil, err
	}
	hosts = slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	return c.Subject.CommonName, hosts, nil
}

// Serial returns the serial (hex, as the inventory writes it) of a
// certificate file's first certificate.
func Serial(certFile string) (string, error) {
	c, err := readCert(certFile)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", c.SerialNumber), nil
}

// ParseCertFile reads the first certificate of a PEM file.
func ParseCertFile(path string) (*x509.Certificate, error) { return readCert(path) }
