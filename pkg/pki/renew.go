package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// PrevSuffix is appended to a renewed certificate's file name for the
// copy of the certificate it replaced, kept until the new one is seen in
// a live handshake (ForgetPrevious).
const PrevSuffix = ".prev"

// Renewal is one leaf a renewal, a CA rotation or its rollback replaced
// (ReplaceLeaf, Install).
type Renewal struct {
	// Host is the agent of the host whose certificate it is, when not
	// this machine's (a renewal the coordinator pushed to a joined host).
	Host      string    `json:"host,omitempty"`
	Name      string    `json:"name"`
	File      string    `json:"file"`
	OldSerial string    `json:"oldSerial"`
	NewSerial string    `json:"newSerial"`
	NotAfter  time.Time `json:"notAfter"`
}

// replaceLeaf writes data (the PEM of the leaf nc, then any CA
// certificates served after it) as the certificate file path of the leaf
// name, whose current certificate is cur. The file it replaces is kept
// beside it first (PrevSuffix), so a crash between the two atomic writes
// leaves the certificate as it was and a re-run redoes both.
func replaceLeaf(name, path string, cur, nc *x509.Certificate, data []byte) (Renewal, error) {
	old, err := os.ReadFile(path)
	if err != nil {
		return Renewal{}, err
	}
	if err := atomicfile.WriteFile(path+PrevSuffix, old, 0o644); err != nil {
		return Renewal{}, fmt.Errorf("keep the previous %s: %w", name, err)
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return Renewal{}, fmt.Errorf("write %s: %w", name, err)
	}
	return Renewal{Name: name, File: path, OldSerial: fmt.Sprintf("%x", cur.SerialNumber),
		NewSerial: fmt.Sprintf("%x", nc.SerialNumber), NotAfter: nc.NotAfter.UTC()}, nil
}

// ForgetPrevious removes the copy of the certificate a renewal replaced
// (once the new one was seen in use).
func ForgetPrevious(r Renewal) error {
	if err := os.Remove(r.File + PrevSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// reissue signs a copy of old (subject, names, usages) for the public key
// pub with a new serial and lifetime, cut at the CA's expiry.
func reissue(old *x509.Certificate, pub *ecdsa.PublicKey, ca *x509.Certificate, caKey *ecdsa.PrivateKey, lifetime time.Duration, now time.Time) ([]byte, error) {
	notAfter := LeafNotAfter(ca, lifetime, now)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      old.Subject,
		NotBefore:    now.Add(-backdate(lifetime)),
		NotAfter:     notAfter,
		KeyUsage:     old.KeyUsage,
		ExtKeyUsage:  old.ExtKeyUsage,
		DNSNames:     old.DNSNames,
		IPAddresses:  old.IPAddresses,
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
}

var clientNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// ErrBadClientName: a client name Steward cannot issue a certificate for.
var ErrBadClientName = errors.New("invalid client name")

// CheckClientName refuses a client name that is not a plain name or would
// take an identity Steward uses itself: the admin's (which the agents'
// APIs let in), an agent's or host's, or the cluster's server or peer
// name (which the peer port lets in).
func CheckClientName(clusterName, name string) error {
	if !clientNameRE.MatchString(name) {
		return fmt.Errorf("%w %q: use lower-case letters, digits, '-' and '.'", ErrBadClientName, name)
	}
	if name == AdminCN || strings.HasPrefix(name, AdminCN+"-") || name == clusterName+"-peer" || name == clusterName+"-server" || name == clusterName+"-ca" {
		return fmt.Errorf("%w %q: the name is one of Steward's own identities; choose the name of the client (for example kube-apiserver)", ErrBadClientName, name)
	}
	return nil
}

// ClientFiles are where an issued client certificate lives.
type ClientFiles struct {
	Name string `json:"name"`
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// IssueClient issues a client certificate (client auth only, common name
// name) for a user of etcd such as kube-apiserver, from the CA in dir,
// valid for lifetime (v.Leaf when zero), and records it in dir/clients
// (NAME.crt, NAME.key 0600), where Inventory lists it and a renewal renews it.
// A client of that name already issued is reissued with a new key. With
// out set, the CA, certificate and key are also copied there (directory
// 0700, key 0600) and the copies are returned.
func IssueClient(dir, clusterName, name string, lifetime time.Duration, out string, v Validity) (ClientFiles, error) {
	v = v.WithDefaults()
	if err := CheckClientName(clusterName, name); err != nil {
		return ClientFiles{}, err
	}
	// The server and peer certificates' own names (after a take-over, the
	// operator's peer name, which the peer ports let in): never a client's.
	for _, f := range []string{PeerCert, ServerCert} {
		if cn, err := CommonName(filepath.Join(dir, f)); err == nil && cn == name {
			return ClientFiles{}, fmt.Errorf("%w %q: it is the common name of %s, which the members' peer ports let in; choose the name of the client", ErrBadClientName, name, f)
		}
	}
	if lifetime == 0 {
		lifetime = v.Leaf
	}
	if lifetime < 0 {
		return ClientFiles{}, fmt.Errorf("%w: client certificate lifetime %s is not positive", ErrBadValidity, lifetime)
	}
	if RotationInProgress(dir) {
		// The old CA would sign it (ca.key is still the old one) and the
		// rotation's later steps would refuse it as another CA's.
		return ClientFiles{}, ErrRotationInProgress
	}
	caCert, caKey, err := loadPair(filepath.Join(dir, CACert), filepath.Join(dir, CAKey))
	if errors.Is(err, os.ErrNotExist) {
		return ClientFiles{}, fmt.Errorf("issue client certificate %s: %w (%s)", name, ErrNoCAKey, filepath.Join(dir, CAKey))
	}
	if err != nil {
		return ClientFiles{}, fmt.Errorf("issue client certificate %s: CA: %w", name, err)
	}
	if lifetime > time.Until(caCert.NotAfter) {
		return ClientFiles{}, fmt.Errorf("%w: client certificate lifetime %s outlives the CA, which expires %s", ErrBadValidity, lifetime, caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	der, key, err := sign(caCert, caKey, nil, name, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, lifetime)
	if err != nil {
		return ClientFiles{}, fmt.Errorf("issue client certificate %s: %w", name, err)
	}
	cd := filepath.Join(dir, ClientsDir)
	if err := os.MkdirAll(cd, 0o700); err != nil {
		return ClientFiles{}, fmt.Errorf("issue client certificate %s: %w", name, err)
	}
	f := ClientFiles{Name: name, CA: filepath.Join(dir, CACert), Cert: filepath.Join(cd, name+".crt"), Key: filepath.Join(cd, name+".key")}
	if err := writePair(f.Cert, f.Key, der, key, true); err != nil {
		return ClientFiles{}, fmt.Errorf("issue client certificate %s: %w", name, err)
	}
	if out == "" {
		return f, nil
	}
	return CopyClient(f, out)
}

// CopyClient copies an issued client's CA, certificate and key into out
// (created 0700; the key 0600) and returns the copies.
func CopyClient(f ClientFiles, out string) (ClientFiles, error) {
	if err := os.MkdirAll(out, 0o700); err != nil {
		return ClientFiles{}, fmt.Errorf("copy client certificate %s: %w", f.Name, err)
	}
	c := ClientFiles{Name: f.Name, CA: filepath.Join(out, CACert), Cert: filepath.Join(out, f.Name+".crt"), Key: filepath.Join(out, f.Name+".key")}
	for _, p := range []struct {
		from, to string
		mode     os.FileMode
	}{{f.Key, c.Key, 0o600}, {f.Cert, c.Cert, 0o644}, {f.CA, c.CA, 0o644}} {
		b, err := os.ReadFile(p.from)
		if err != nil {
			return ClientFiles{}, fmt.Errorf("copy client certificate %s: %w", f.Name, err)
		}
		if err := atomicfile.WriteFile(p.to, b, p.mode); err != nil {
			return ClientFiles{}, fmt.Errorf("copy client certificate %s: %w", f.Name, err)
		}
	}
	return c, nil
}
