// Package pki generates the certificates a Steward cluster runs with: a CA,
// a server certificate for client traffic, a peer certificate for member to
// member traffic, and a client certificate for Steward and etcdctl.
//
// Invariant: private keys are written 0600 and never logged. Certificates are
// reissued (with the same CA) when a host appears that they do not cover, so
// adding a member on a new address does not need the operator's hands.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// File names inside the certificate directory.
const (
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	ServerCert = "server.crt"
	ServerKey  = "server.key"
	PeerCert   = "peer.crt"
	PeerKey    = "peer.key"
	ClientCert = "client.crt"
	ClientKey  = "client.key"
)

// Validity of generated certificates.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
)

// Files are the absolute paths of a certificate directory's files.
type Files struct {
	CA, ServerCert, ServerKey, PeerCert, PeerKey, ClientCert, ClientKey string
}

// FilesIn returns the file paths inside dir.
func FilesIn(dir string) Files {
	j := func(n string) string { return filepath.Join(dir, n) }
	return Files{
		CA: j(CACert), ServerCert: j(ServerCert), ServerKey: j(ServerKey),
		PeerCert: j(PeerCert), PeerKey: j(PeerKey), ClientCert: j(ClientCert), ClientKey: j(ClientKey),
	}
}

// Ensure makes sure dir holds a CA and server, peer and client certificates
// whose names cover hosts (IP addresses or DNS names). Existing valid
// certificates are kept; ones that miss a host or expire within 30 days are
// reissued by the same CA.
func Ensure(dir, clusterName string, hosts []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	hosts = append(slices.Clone(hosts), "127.0.0.1", "localhost")
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)

	caCert, caKey, err := loadPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if errors.Is(err, os.ErrNotExist) {
		caCert, caKey, err = newCA(dir, clusterName)
	}
	if err != nil {
		return fmt.Errorf("certificates: CA: %w", err)
	}
	leaves := []struct {
		cert, key, cn string
		usage         []x509.ExtKeyUsage
		hosts         []string
	}{
		// etcd's gRPC gateway dials the server with the server certificate,
		// so server and peer certificates carry both usages.
		{ServerCert, ServerKey, clusterName + "-server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts},
		{PeerCert, PeerKey, clusterName + "-peer", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts},
		{ClientCert, ClientKey, "steward", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil},
	}
	for _, l := range leaves {
		cp, kp := filepath.Join(dir, l.cert), filepath.Join(dir, l.key)
		cert, _, err := loadPair(cp, kp)
		if err == nil && covers(cert, l.hosts) && time.Until(cert.NotAfter) > 30*24*time.Hour && cert.CheckSignatureFrom(caCert) == nil {
			continue
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("certificates: %s: %w", l.cert, err)
		}
		if err := issue(cp, kp, caCert, caKey, l.cn, l.usage, l.hosts); err != nil {
			return fmt.Errorf("certificates: issue %s: %w", l.cert, err)
		}
	}
	return nil
}

// ClientTLS returns a TLS config that trusts the CA and presents the client
// certificate.
func ClientTLS(dir string) (*tls.Config, error) {
	f := FilesIn(dir)
	pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("load client certificate from %s: %w", dir, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("load CA %s: no certificate found", f.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func covers(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newCA(dir, clusterName string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: clusterName + "-ca", Organization: []string{"steward"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey), der, key); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func issue(certPath, keyPath string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage []x509.ExtKeyUsage, hosts []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"steward"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, der, key)
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	// Key first: a certificate never exists without its key.
	if err := atomicfile.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return atomicfile.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if _, serr := os.Stat(certPath); errors.Is(serr, os.ErrNotExist) {
			return nil, nil, serr
		}
		if _, serr := os.Stat(keyPath); errors.Is(serr, os.ErrNotExist) {
			return nil, nil, serr
		}
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
