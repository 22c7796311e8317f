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
	return ParseCA(cb, kb, certFile, keyFile)
}

// ParseCA is LoadCA on the contents: certPEM (exactly one certificate)
// and keyPEM, named certName and keyName in its errors.
func ParseCA(cb, kb []byte, certName, keyName string) (*CA, error) {
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
		return nil, fmt.Errorf("%s: %w: it holds %d certificates, want the one CA whose key is given", certName, ErrNotCA, len(certs))
	}
	cert, err := x509.ParseCertificate(certs[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", certName, ErrUnparsable, err)
	}
	if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("%s (%s): %w: it may not sign certificates", certName, cert.Subject.CommonName, ErrNotCA)
	}
	pemCert := pem.EncodeToMemory(certs[0])
	pair, err := tls.X509KeyPair(pemCert, kb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w in %s (%v)", keyName, ErrKeyMismatch, certName, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w (it is %T): Steward issues and renews with ECDSA keys only", keyName, ErrKeyType, pair.PrivateKey)
	}
	return &CA{Cert: cert, Key: key, PEM: pemCert}, nil
}

// WriteCA installs ca as the CA of the certificate directory dir: ca.key
// (0600, SEC 1 PEM) first, then ca.crt, each written atomically. The
// leaves are issued from it by EnsureWith.
func WriteCA(dir string, ca *CA) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CAKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, CACert), ca.PEM, 0o644)
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
