package pki

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"time"
)

// The x509 and file tools the certificate lifecycle (pkg/certs) builds on:
// read, load and write pairs, sign and reissue with one signer, replace a
// leaf keeping the previous copy. They hold no policy (what to reissue,
// with which CA, when): that is the lifecycle's. Only pkg/certs uses them
// (internal/architecture's TestRoomTools).

// LeafFiles is a leaf pair of a certificate directory: its name (server,
// peer, client, agent, clients/NAME) and its certificate and key files.
type LeafFiles struct{ Name, Cert, Key string }

// FindLeaves returns the leaf pairs of dir named (every one present when
// names is empty); an unknown name is ErrUnknownCert.
func FindLeaves(dir string, names []string) ([]LeafFiles, error) {
	ls, err := findLeaves(dir, names)
	out := make([]LeafFiles, 0, len(ls))
	for _, l := range ls {
		out = append(out, LeafFiles{l.name, l.cert, l.key})
	}
	return out, err
}

// ReadKey reads an ECDSA private key (SEC 1 or PKCS #8) from a PEM file.
func ReadKey(path string) (*ecdsa.PrivateKey, error) { return readKey(path) }

// LoadLeaf reads a leaf's certificate and key and checks that the key is
// the certificate's and, when ca is not nil, that ca signed it.
func LoadLeaf(certPath, keyPath string, ca *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return loadLeaf(certPath, keyPath, ca)
}

// LoadPair reads a certificate and its ECDSA key (a CA's); a missing file
// is os.ErrNotExist.
func LoadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	return loadPair(certPath, keyPath)
}

// WritePair writes a certificate and, when newKey, its key first (0600).
func WritePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey, newKey bool) error {
	return writePair(certPath, keyPath, der, key, newKey)
}

// Sign issues a leaf (Steward's subject for cn, usage, hosts) of lifetime,
// cut at the CA's expiry, for key (a new one when nil).
func Sign(ca *x509.Certificate, caKey, key *ecdsa.PrivateKey, cn string, usage []x509.ExtKeyUsage, hosts []string, lifetime time.Duration) ([]byte, *ecdsa.PrivateKey, error) {
	return sign(ca, caKey, key, cn, usage, hosts, lifetime)
}

// ReissueBy is the one reissue with one signer: a copy of old (subject,
// names, usages) for the public key pub, signed by ca with caKey, with a
// new serial and lifetime cut at ca's expiry. It returns the DER.
func ReissueBy(old *x509.Certificate, pub *ecdsa.PublicKey, ca *x509.Certificate, caKey *ecdsa.PrivateKey, lifetime time.Duration, now time.Time) ([]byte, error) {
	return reissue(old, pub, ca, caKey, lifetime, now)
}

// ReplaceLeaf writes data (the PEM of the leaf nc, then any CA
// certificates served after it) as the certificate file path of the leaf
// name, whose current certificate is cur, keeping the file it replaces
// beside it first (PrevSuffix).
func ReplaceLeaf(name, path string, cur, nc *x509.Certificate, data []byte) (Renewal, error) {
	return replaceLeaf(name, path, cur, nc, data)
}

// NewSerial is a random 127-bit certificate serial number.
func NewSerial() *big.Int { return serial() }

// Backdate is how far before now a certificate of lifetime starts (clock
// skew between hosts).
func Backdate(lifetime time.Duration) time.Duration { return backdate(lifetime) }

// PEM encodes a DER certificate.
func PEM(der []byte) []byte { return pemCert(der) }

// ReadBundle reads every certificate of the trust bundle at path.
func ReadBundle(path string) ([]*x509.Certificate, error) { return readBundle(path) }

// SignerIn returns the CA of cas that signed c, or nil.
func SignerIn(c *x509.Certificate, cas []*x509.Certificate) *x509.Certificate {
	return signerIn(c, cas)
}

// CANames names the CAs of cas (common name and serial), for errors.
func CANames(cas []*x509.Certificate) string { return names(cas) }

// Covers reports whether c is valid for every one of hosts.
func Covers(c *x509.Certificate, hosts []string) bool { return covers(c, hosts) }

// SamePublicKey reports whether a and b are for the same ECDSA key.
func SamePublicKey(a, b *x509.Certificate) bool { return samePublicKey(a, b) }

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func samePublicKey(a, b *x509.Certificate) bool {
	pa, ok := a.PublicKey.(*ecdsa.PublicKey)
	pb, ok2 := b.PublicKey.(*ecdsa.PublicKey)
	return ok && ok2 && pa.Equal(pb)
}
