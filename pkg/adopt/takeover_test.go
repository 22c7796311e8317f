package adopt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// testCA is a CA made with Go's crypto, as an operator's.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM string
	keyFile string
	file    string
}

func newTestCA(t *testing.T, dir, cn string, life time.Duration) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(life),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCA{key: key, file: filepath.Join(dir, cn+".pem"), keyFile: filepath.Join(dir, cn+"-key.pem")}
	c.cert, _ = x509.ParseCertificate(der)
	c.certPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kb, _ := x509.MarshalECPrivateKey(key)
	writeFile(t, c.file, c.certPEM)
	writeFile(t, c.keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	return c
}

// leaf writes a leaf of common name cn for 127.0.0.1 signed by the CA.
func (c testCA) leaf(t *testing.T, path, cn string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTakeOverCheckRefusals: what a certificate take-over refuses before
// it asks the cluster anything, each one refusal of its kind naming the
// problem, and nothing written: a cluster not attached, without TLS,
// taken over already or not fully adopted; a key of another CA; a CA that
// did not sign a member's peer certificate or the operator's client
// certificate; the members trusting a second CA; a CA expiring within a
// leaf's lifetime; peer certificates of different common names where a
// member lets in only one.
func TestTakeOverCheckRefusals(t *testing.T) {
	files := t.TempDir()
	op := newTestCA(t, files, "operator-ca", 2*365*24*time.Hour)
	other := newTestCA(t, files, "other-ca", 2*365*24*time.Hour)
	short := newTestCA(t, files, "short-ca", 30*24*time.Hour)
	op.leaf(t, filepath.Join(files, "client.pem"), "etcd-client")
	op.leaf(t, filepath.Join(files, "server.pem"), "etcd-server")
	other.leaf(t, filepath.Join(files, "other-peer.pem"), "etcd-server")
	op.leaf(t, filepath.Join(files, "peer-b.pem"), "etcd-peer-b")
	writeFile(t, filepath.Join(files, "bundle.pem"), op.certPEM+other.certPEM)
	memberTLS := func() *spec.AdoptedTLS {
		return &spec.AdoptedTLS{CA: op.file, ServerCert: filepath.Join(files, "server.pem"), ServerKey: "/k", PeerCert: filepath.Join(files, "server.pem"), PeerKey: "/k"}
	}
	adopted := func(edit func(*spec.Cluster)) *cluster.Cluster {
		s := &spec.Cluster{
			Name: "kube", Token: "attached-feed", Version: "3.5.35",
			External: &spec.External{CAFile: op.file, CertFile: filepath.Join(files, "client.pem"), KeyFile: "/c.key", ClusterID: "feed"},
			Agents:   []spec.Agent{{Name: spec.LocalAgent, Address: "unix:///tmp/agent.sock"}},
		}
		for _, n := range []string{"m1", "m2"} {
			s.Members = append(s.Members, spec.Member{Name: n, Agent: spec.LocalAgent, DataDir: "/var/lib/" + n, ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380",
				Adopted: &spec.Adopted{TLS: memberTLS()}})
		}
		if edit != nil {
			edit(s)
		}
		return &cluster.Cluster{Dir: t.TempDir(), Spec: s}
	}
	opts := TakeOverOptions{CACert: op.file, CAKey: op.keyFile}
	for _, tc := range []struct {
		name string
		c    *cluster.Cluster
		o    TakeOverOptions
		kind error
		want string
	}{
		{"not attached", adopted(func(s *spec.Cluster) { s.External = nil }), opts, ErrNotAttached, "is not attached"},
		{"without TLS", adopted(func(s *spec.Cluster) { s.TLS.Disabled = true }), opts, ErrOwnCerts, "without TLS"},
		{"taken over already", adopted(func(s *spec.Cluster) { s.External.CAFile, s.External.CertFile, s.External.KeyFile = "", "", "" }), opts, ErrTakenOver, "took over issuing"},
		{"a member not adopted", adopted(func(s *spec.Cluster) { s.Members[1].Agent, s.Members[1].Adopted = "", nil }), opts, ErrNotAllAdopted, "cluster kube still has members Steward does not run (m2)"},
		{"the key of another CA", adopted(nil), TakeOverOptions{CACert: op.file, CAKey: other.keyFile}, ErrCA, "does not match"},
		{"a CA that did not sign a peer certificate", adopted(func(s *spec.Cluster) { s.Members[1].Adopted.TLS.PeerCert = filepath.Join(files, "other-peer.pem") }), opts,
			ErrCANotIssuer, "member m2's peer certificate"},
		{"a CA that did not sign the client certificate", adopted(func(s *spec.Cluster) { s.External.CertFile = filepath.Join(files, "other-peer.pem") }), opts,
			ErrCANotIssuer, "the operator's client certificate"},
		{"another CA in the members' bundle", adopted(func(s *spec.Cluster) { s.Members[0].Adopted.TLS.CA = filepath.Join(files, "bundle.pem") }), opts,
			ErrCANotIssuer, "1 other CA certificates"},
		{"a CA expiring within a leaf's lifetime", adopted(nil), TakeOverOptions{CACert: short.file, CAKey: short.keyFile}, ErrCAExpiresSoon, "within the lifetime of a leaf"},
		{"peer certificates of two names, a member restricting", adopted(func(s *spec.Cluster) {
			s.Members[1].Adopted.TLS.PeerCert = filepath.Join(files, "peer-b.pem")
			s.Members[1].Adopted.TLS.PeerAllowedCN = "etcd-peer-b"
		}), opts, ErrPeerNames, `"etcd-server" (m1), and m2 lets in only "etcd-peer-b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, _, err := TakeOverCheck(t.Context(), tc.c, tc.o, time.Now())
			var r *refusal.Refusal
			if ca != nil || !errors.As(err, &r) || !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("TakeOverCheck = %v; want a refusal of kind %v containing %q", err, tc.kind, tc.want)
			}
			if ents, _ := os.ReadDir(tc.c.Dir); len(ents) > 0 {
				t.Errorf("a refused take-over wrote into %s", tc.c.Dir)
			}
		})
	}
}
