// Package pki generates the certificates a Steward cluster runs with: a CA,
// a server certificate for client traffic, a peer certificate for member to
// member traffic, and a client certificate for Steward and etcdctl.
//
// Lifetimes come from a Validity (the spec's tls fields). The inventory
// (Inventory, ServedCert) reads what there is, in files and in live TLS
// handshakes; IssueClient issues client certificates for the users of
// etcd. A joined host's side of its certificates is here too: Install (a
// leaf the coordinator reissued), InstallTrustBundle. pki is x509 and files
// only: when to renew, rotate the CA, roll a rotation back or take over
// certificates is the certificate lifecycle's (pkg/certs), which builds on
// the tools of tools.go (ReissueBy: the one reissue with one signer).
//
// Invariant: private keys are written 0600 and never logged. Certificates are
// reissued (with the same CA and key) when a host appears that they do not
// cover or their renewal point has come, so adding a member on a new address
// does not need the operator's hands. A file that does not parse, a key that
// does not match its certificate and a leaf of another CA are refused,
// replacing nothing.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
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
	// BackupAuthKey is the cluster backup key: 32 random bytes (hex) that
	// authenticate every backup manifest (package backup, AuthKey). It is
	// generated with the CA and handed to every host in its join file.
	BackupAuthKey = "backup-auth.key"
)

// Default validity of generated certificates (Validity's zero fields).
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// Validity says how long certificates live and when leaves are renewed.
// Zero fields take the defaults (WithDefaults).
type Validity struct {
	// CA is the lifetime of a new CA (default DefaultCAValidity).
	CA time.Duration
	// Leaf is the lifetime of a new leaf: server, peer, client, a host's
	// and an issued client's (default DefaultLeafValidity).
	Leaf time.Duration
	// RenewBefore is the renewal margin: a leaf with no more than this left
	// is renewed (default a third of Leaf: renewal at two thirds of its
	// lifetime).
	RenewBefore time.Duration
}

// WithDefaults fills the zero fields.
func (v Validity) WithDefaults() Validity {
	if v.CA <= 0 {
		v.CA = DefaultCAValidity
	}
	if v.Leaf <= 0 {
		v.Leaf = DefaultLeafValidity
	}
	if v.RenewBefore <= 0 {
		v.RenewBefore = v.Leaf / 3
	}
	return v
}

// ErrBadValidity: lifetimes that cannot work (a leaf that would be renewed
// as soon as it is issued, or that outlives its CA).
var ErrBadValidity = errors.New("invalid certificate validity")

// Check refuses lifetimes that cannot work, with one error naming the
// problem.
func (v Validity) Check() error {
	v = v.WithDefaults()
	switch {
	case v.RenewBefore >= v.Leaf:
		return fmt.Errorf("%w: the leaf lifetime %s is not longer than the renewal margin %s: every leaf would be renewed as soon as it is issued", ErrBadValidity, v.Leaf, v.RenewBefore)
	case v.Leaf > v.CA:
		return fmt.Errorf("%w: the leaf lifetime %s is longer than the CA's %s", ErrBadValidity, v.Leaf, v.CA)
	}
	return nil
}

// Due reports whether a certificate is at or past its renewal point.
func (v Validity) Due(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotAfter.Add(-v.WithDefaults().RenewBefore))
}

// backdate is how far before now a new certificate's NotBefore lies (clock
// skew between hosts): an hour, or a tenth of a short lifetime.
func backdate(lifetime time.Duration) time.Duration {
	return min(time.Hour, lifetime/10)
}

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
// whose names cover hosts (IP addresses or DNS names), with the default
// validity (EnsureWith).
func Ensure(dir, clusterName string, hosts []string) error {
	return EnsureWith(dir, clusterName, hosts, Validity{})
}

// EnsureWith makes sure dir holds a CA and server, peer and client
// certificates whose names cover hosts (IP addresses or DNS names).
// Existing valid certificates are kept; ones that miss a host or are past
// their renewal point (v.RenewBefore) are reissued by the same CA with the
// same key, so the certificate file is the one file that changes (a server
// reading the pair at each handshake never sees a certificate without its
// key). A file that does not parse, a key that does not match its
// certificate, or a leaf the CA did not sign is refused (ErrUnparsable,
// ErrKeyMismatch, ErrNotSignedByCA) and nothing is replaced. Without a CA
// (neither ca.crt nor ca.key), a new CA is created and every leaf reissued
// by it with a new key.
func EnsureWith(dir, clusterName string, hosts []string, v Validity) error {
	v = v.WithDefaults()
	if err := v.Check(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	hosts = append(slices.Clone(hosts), "127.0.0.1", "localhost")
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)

	// fresh: no CA was there, so the leaves there (of a CA gone) are
	// all reissued with new keys by the new one.
	fresh := false
	caCert, caKey, err := loadPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dir, CACert)); serr == nil {
			// A CA certificate without its key (a coordinator that took
			// over with the admin credentials only): a new CA would replace
			// the one every member and agent trusts. Check the leaves with
			// the certificate; issuing needs the key.
			return ensureWithoutCAKey(dir, hosts)
		}
		caCert, caKey, err = newCA(dir, clusterName, v.CA)
		fresh = true
		if err == nil {
			// A new cluster: its backup key is born with its CA.
			if _, err = EnsureBackupAuthKey(dir); err != nil {
				return fmt.Errorf("certificates: %w", err)
			}
		}
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
		{ClientCert, ClientKey, AdminCN, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil},
	}
	// Check every leaf before issuing any: a refusal replaces nothing.
	type todo struct {
		i   int
		key *ecdsa.PrivateKey
		// old is the leaf reissued with its key: its common name and
		// names are kept (a leaf issued at a certificate take-over keeps
		// the operator's peer name, which every member's
		// --peer-cert-allowed-cn names, and the names clients dial).
		old *x509.Certificate
	}
	var issue []todo
	// During a CA rotation a leaf may be the next CA's already.
	var next *x509.Certificate
	if !fresh && RotationInProgress(dir) {
		if next, err = readCert(filepath.Join(dir, CANextCert)); err != nil {
			return fmt.Errorf("certificates: next CA: %w", err)
		}
	}
	for i, l := range leaves {
		if fresh {
			issue = append(issue, todo{i, nil, nil})
			continue
		}
		cert, key, err := loadLeaf(filepath.Join(dir, l.cert), filepath.Join(dir, l.key), caCert)
		if errors.Is(err, ErrNotSignedByCA) && next != nil {
			cert, key, err = loadLeaf(filepath.Join(dir, l.cert), filepath.Join(dir, l.key), next)
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			issue = append(issue, todo{i, nil, nil})
		case err != nil:
			return fmt.Errorf("certificates: %w", err)
		case !covers(cert, l.hosts) || (v.Due(cert, time.Now()) && !AtCALimit(cert, caCert, v.Leaf, time.Now())):
			issue = append(issue, todo{i, key, cert})
		}
	}
	if len(issue) > 0 && next != nil {
		return fmt.Errorf("certificates: %s must be issued or renewed, and %w", leaves[issue[0].i].cert, ErrRotationInProgress)
	}
	for _, t := range issue {
		l := leaves[t.i]
		cn, hosts := l.cn, l.hosts
		if t.old != nil && l.hosts != nil {
			cn, hosts = t.old.Subject.CommonName, unionNames(hosts, t.old)
		}
		der, key, err := sign(caCert, caKey, t.key, cn, l.usage, hosts, v.Leaf)
		if err != nil {
			return fmt.Errorf("certificates: issue %s: %w", l.cert, err)
		}
		if err := writePair(filepath.Join(dir, l.cert), filepath.Join(dir, l.key), der, key, t.key == nil); err != nil {
			return fmt.Errorf("certificates: issue %s: %w", l.cert, err)
		}
	}
	return nil
}

// ErrNoCAKey: a certificate must be issued, and the CA's key is not here.
var ErrNoCAKey = errors.New("the CA key is not in the certificate directory")

// ensureWithoutCAKey checks that the client certificate is there and valid
// for the CA certificate in dir, and that server and peer certificates, if
// this machine needs them (hosts), cover the hosts; it never issues.
func ensureWithoutCAKey(dir string, hosts []string) error {
	b, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return fmt.Errorf("certificates: %s holds no certificate", filepath.Join(dir, CACert))
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return fmt.Errorf("certificates: CA: %w", err)
	}
	type leaf struct {
		cert, key string
		hosts     []string
	}
	leaves := []leaf{{ClientCert, ClientKey, nil}}
	if len(hosts) > 2 { // more than the 127.0.0.1 and localhost Ensure adds
		leaves = append(leaves, leaf{ServerCert, ServerKey, hosts}, leaf{PeerCert, PeerKey, hosts})
	}
	for _, l := range leaves {
		cert, _, err := loadPair(filepath.Join(dir, l.cert), filepath.Join(dir, l.key))
		if err != nil || !covers(cert, l.hosts) || cert.CheckSignatureFrom(ca) != nil || time.Now().After(cert.NotAfter) {
			return fmt.Errorf("certificates: %s must be issued or renewed, and %w (%s): put the CA key there, or issue it where the key is", l.cert, ErrNoCAKey, filepath.Join(dir, CAKey))
		}
	}
	return nil
}

// ClientTLS returns a TLS config that trusts the CA and presents the client
// certificate.
func ClientTLS(dir string) (*tls.Config, error) {
	f := FilesIn(dir)
	return ClientTLSFiles(f.CA, f.ClientCert, f.ClientKey)
}

// ClientTLSFiles returns a TLS config that trusts the CA in caFile and
// presents the certificate and key of the files named.
func ClientTLSFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load client certificate %s: %w", certFile, err)
	}
	pool, err := CAPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// unionNames returns hosts and the DNS names and IP addresses c names,
// sorted, each once.
func unionNames(hosts []string, c *x509.Certificate) []string {
	out := append(slices.Clone(hosts), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func covers(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newCA(dir, clusterName string, lifetime time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: clusterName + "-ca", Organization: []string{"steward"}},
		NotBefore:             time.Now().Add(-backdate(lifetime)),
		NotAfter:              time.Now().Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey), der, key, true); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// writePair writes a certificate and, when newKey, its key first (a
// certificate never exists without its key); a certificate reissued with
// the key already there is one atomic rename.
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey, newKey bool) error {
	if newKey {
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			return err
		}
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

// Files of a host's agent (in its certificate directory): the agent's own
// certificate, which it serves its API with over mutual TLS. The etcd
// server and peer certificates of that host keep the names above.
const (
	AgentCert = "agent.crt"
	AgentKey  = "agent.key"
)

// AdminCN is the common name of the admin client certificate (client.crt):
// the identity Steward's commands and `steward env` use, and the only one
// an agent's API accepts.
const AdminCN = "steward"

// AgentCN is the common name of the certificate agent name serves its API
// with; a coordinator checks it, so another host's agent certificate is
// refused even when signed by the same CA.
func AgentCN(name string) string { return "steward-agent:" + name }

// HostBundle holds, PEM-encoded, the certificates and keys one host needs:
// the cluster CA, its agent's certificate, and the etcd server and peer
// certificates of the members it runs, each naming the host's address.
type HostBundle struct {
	CA         []byte
	AgentCert  []byte
	AgentKey   []byte
	ServerCert []byte
	ServerKey  []byte
	PeerCert   []byte
	PeerKey    []byte
	// ClientCert and ClientKey are the host's client identity towards etcd
	// (HostCN: the backup loop on that host reads and watches through it).
	// They are not the admin's: no agent's API accepts them.
	ClientCert []byte
	ClientKey  []byte
	// BackupAuthKey is the cluster backup key (BackupAuthKey), so the
	// host's backup loop writes manifests the coordinator trusts; empty
	// when the coordinator has none yet.
	BackupAuthKey []byte
}

// CommonName returns the subject common name of the certificate in a PEM file.
func CommonName(certFile string) (string, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", fmt.Errorf("%s: no PEM certificate", certFile)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", certFile, err)
	}
	return c.Subject.CommonName, nil
}

// HostCN is the common name of a host's client certificate.
func HostCN(name string) string { return "steward-host:" + name }

// IssueHost issues a host's certificates from the CA in dir (which Ensure
// created). address is the host's IP address or DNS name. The peer
// certificate keeps the cluster-wide common name (CLUSTER-peer), so members
// can restrict their peer port to it. serverNames are more names the
// server certificate carries (a Service in front of the members).
func IssueHost(dir, clusterName, agentName, address string, v Validity, serverNames ...string) (*HostBundle, error) {
	v = v.WithDefaults()
	if RotationInProgress(dir) {
		// As in IssueClient: the old CA would sign a bundle trusting both.
		return nil, fmt.Errorf("certificates for host %s: %w", agentName, ErrRotationInProgress)
	}
	caCert, caKey, err := loadPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if err != nil {
		return nil, fmt.Errorf("certificates for host %s: CA: %w", agentName, err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, CACert))
	if err != nil {
		return nil, err
	}
	hosts := []string{address, "127.0.0.1", "localhost"}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	b := &HostBundle{CA: caPEM}
	if ak, err := os.ReadFile(filepath.Join(dir, BackupAuthKey)); err == nil {
		b.BackupAuthKey = ak
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("certificates for host %s: %w", agentName, err)
	}
	for _, l := range []struct {
		cn        string
		hosts     []string
		cert, key *[]byte
	}{
		{AgentCN(agentName), []string{address}, &b.AgentCert, &b.AgentKey},
		{clusterName + "-server", append(slices.Clone(hosts), serverNames...), &b.ServerCert, &b.ServerKey},
		{clusterName + "-peer", hosts, &b.PeerCert, &b.PeerKey},
		{HostCN(agentName), []string{address}, &b.ClientCert, &b.ClientKey},
	} {
		der, key, err := sign(caCert, caKey, nil, l.cn, both, l.hosts, v.Leaf)
		if err != nil {
			return nil, fmt.Errorf("certificates for host %s: %w", agentName, err)
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		*l.cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		*l.key = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	return b, nil
}

// WriteHost writes a host bundle into a certificate directory: keys 0600,
// each key before its certificate.
func WriteHost(dir string, b *HostBundle) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CACert, b.CA, 0o644},
		{AgentKey, b.AgentKey, 0o600}, {AgentCert, b.AgentCert, 0o644},
		{ServerKey, b.ServerKey, 0o600}, {ServerCert, b.ServerCert, 0o644},
		{PeerKey, b.PeerKey, 0o600}, {PeerCert, b.PeerCert, 0o644},
		{ClientKey, b.ClientKey, 0o600}, {ClientCert, b.ClientCert, 0o644},
		{BackupAuthKey, b.BackupAuthKey, 0o600},
	} {
		if f.data == nil && f.name == BackupAuthKey {
			continue // a join file from before the cluster had one
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("certificates: %w", err)
		}
	}
	return nil
}

// CheckHost verifies that a host bundle is whole and belongs together: every
// certificate chains to the bundle's CA and matches its key, the agent's
// names agentName and covers address, and none has expired.
func CheckHost(b *HostBundle, agentName, address string, now time.Time) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CA) {
		return errors.New("the CA certificate does not parse")
	}
	for _, p := range []struct {
		what      string
		cert, key []byte
	}{{"agent", b.AgentCert, b.AgentKey}, {"server", b.ServerCert, b.ServerKey}, {"peer", b.PeerCert, b.PeerKey}, {"client", b.ClientCert, b.ClientKey}} {
		pair, err := tls.X509KeyPair(p.cert, p.key)
		if err != nil {
			return fmt.Errorf("%s certificate: %w", p.what, err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return fmt.Errorf("%s certificate: %w", p.what, err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("%s certificate: %w", p.what, err)
		}
		if err := c.VerifyHostname(address); err != nil {
			return fmt.Errorf("%s certificate does not name this host's address: %w", p.what, err)
		}
		if p.what == "agent" && c.Subject.CommonName != AgentCN(agentName) {
			return fmt.Errorf("agent certificate is for %q, not %q", c.Subject.CommonName, AgentCN(agentName))
		}
	}
	return nil
}

// AgentServerTLS is the TLS config an agent serves its API with: its own
// certificate, client certificates required and verified against the
// cluster CA, and only the admin identity (AdminCN) let in.
//
// The certificate is loaded again at each handshake (like etcd's), so a
// renewed agent certificate is served without restarting the agent; so is
// the CA bundle, so a rotated CA is trusted (and the old one dropped)
// without restarting it.
func AgentServerTLS(dir string) (*tls.Config, error) {
	certFile, keyFile := filepath.Join(dir, AgentCert), filepath.Join(dir, AgentKey)
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		return nil, fmt.Errorf("load the agent certificate from %s: %w", dir, err)
	}
	caFile := filepath.Join(dir, CACert)
	pool, err := CAPool(caFile)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("load the agent certificate from %s: %w", dir, err)
			}
			return &pair, nil
		},
		ClientCAs:  pool,
		ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no client certificate")
			}
			if cn := cs.PeerCertificates[0].Subject.CommonName; cn != AdminCN {
				return fmt.Errorf("client certificate %q may not use the agent API (only %q)", cn, AdminCN)
			}
			return nil
		},
	}
	// The CA bundle is read again at each handshake too: during a CA
	// rotation the agent trusts what ca.crt holds now (both CAs, then the
	// new one alone), without a restart.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := CAPool(caFile)
		if err != nil {
			return nil, err
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		return c, nil
	}
	return base, nil
}

// AgentClientTLS is the TLS config a coordinator reaches agent name with:
// the admin client certificate, the cluster CA, and the agent's identity
// checked beside its address (the URL's host, which Go verifies).
func AgentClientTLS(dir, name string) (*tls.Config, error) {
	tc, err := ClientTLS(dir)
	if err != nil {
		return nil, err
	}
	want := AgentCN(name)
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no agent certificate")
		}
		if cn := cs.PeerCertificates[0].Subject.CommonName; cn != want {
			return fmt.Errorf("the host answered with the certificate of %q, not of agent %q: is the address in the spec the right host?", cn, want)
		}
		return nil
	}
	return tc, nil
}

// CAPool reads a PEM CA bundle into a certificate pool.
func CAPool(path string) (*x509.CertPool, error) {
	caPEM, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("load CA %s: no certificate found", path)
	}
	return pool, nil
}

// sign issues a leaf certificate of the given lifetime (cut at the CA's
// expiry: a leaf never outlives its CA) and returns its DER and key: key,
// or a new one when key is nil.
func sign(ca *x509.Certificate, caKey, key *ecdsa.PrivateKey, cn string, usage []x509.ExtKeyUsage, hosts []string, lifetime time.Duration) ([]byte, *ecdsa.PrivateKey, error) {
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, nil, err
		}
	}
	now := time.Now()
	notAfter := LeafNotAfter(ca, lifetime, now)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"steward"}},
		NotBefore:    now.Add(-backdate(lifetime)),
		NotAfter:     notAfter,
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
	return der, key, err
}

// EnsureBackupAuthKey creates the cluster backup key in dir (0600, 64 hex
// digits of 32 random bytes) unless it exists, and reports whether it did.
// The key never leaves the certificate directory except in join files and
// the coordinator's hand-over to its hosts.
func EnsureBackupAuthKey(dir string) (created bool, err error) {
	p := filepath.Join(dir, BackupAuthKey)
	if _, err := os.Stat(p); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	// Written aside, then linked into place: link never replaces, so two
	// processes generating at once agree on the one that landed first.
	tmp := fmt.Sprintf("%s.tmp-%d", p, os.Getpid())
	if err := atomicfile.WriteFile(tmp, []byte(hex.EncodeToString(k[:])+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); errors.Is(err, fs.ErrExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return false, fmt.Errorf("cluster backup key: %w", err)
	}
	return true, nil
}
