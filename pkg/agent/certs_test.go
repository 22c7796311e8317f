package agent

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/pki"
)

// hostCertAgent returns a coordinator's certificate directory (with the
// CA key), a joined host's certificate directory written from a host
// bundle of that CA, and a test server running the API of an agent whose
// CertDir is the host's.
func hostCertAgent(t *testing.T) (coord, hostDir string, srv *httptest.Server) {
	t.Helper()
	root := t.TempDir()
	coord, hostDir = filepath.Join(root, "coord"), filepath.Join(root, "host", "pki")
	if err := pki.Ensure(coord, "c", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	b, err := pki.IssueHost(coord, "c", "cp-2", "127.0.0.2", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WriteHost(hostDir, b); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Dir: filepath.Join(root, "host"), CertDir: hostDir, Log: slog.New(slog.DiscardHandler)})
	srv = httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return coord, hostDir, srv
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCertPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// signCert signs a certificate for pub with parent and parentKey, with the
// subject and validity given: the forgeries the agent must refuse.
func signCert(t *testing.T, subject pkix.Name, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer, notBefore, notAfter time.Time) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subject,
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func readKeyFile(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestInstallHostCert: a renewal the coordinator signed from the host's
// current certificate (same key, subject, CA) replaces it, the previous
// one kept as .prev until DELETE .../prev; the key file is untouched.
func TestInstallHostCert(t *testing.T) {
	for _, name := range pki.HostLeafNames {
		t.Run(name, func(t *testing.T) {
			coord, hostDir, srv := hostCertAgent(t)
			code, body := call(t, srv, http.MethodGet, "/v1/certs/"+name, "")
			if code != http.StatusOK {
				t.Fatalf("GET: %d %s", code, body)
			}
			var f agentapi.CertFile
			if err := json.Unmarshal([]byte(body), &f); err != nil {
				t.Fatal(err)
			}
			cur, err := pki.ParseCertPEM([]byte(f.PEM))
			if err != nil {
				t.Fatal(err)
			}
			oldPEM, _ := os.ReadFile(filepath.Join(hostDir, name+".crt"))
			keyBefore, _ := os.ReadFile(filepath.Join(hostDir, name+".key"))
			newPEM, nc, err := certs.Reissue(coord, pki.Validity{Leaf: time.Hour, RenewBefore: 20 * time.Minute}, cur, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			code, body = call(t, srv, http.MethodPut, "/v1/certs/"+name, string(newPEM))
			if code != http.StatusOK {
				t.Fatalf("PUT: %d %s", code, body)
			}
			var r agentapi.CertRenewal
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			if want := nc.SerialNumber.Text(16); r.NewSerial != want || r.OldSerial != cur.SerialNumber.Text(16) {
				t.Errorf("answer %+v, want new serial %s, old %s", r, want, cur.SerialNumber.Text(16))
			}
			if got := readCertFile(t, filepath.Join(hostDir, name+".crt")); got.SerialNumber.Cmp(nc.SerialNumber) != 0 {
				t.Errorf("%s.crt serial %x, want %x", name, got.SerialNumber, nc.SerialNumber)
			}
			if prev, _ := os.ReadFile(filepath.Join(hostDir, name+".crt.prev")); !bytes.Equal(prev, oldPEM) {
				t.Errorf("%s.crt.prev is not the replaced certificate", name)
			}
			if k, _ := os.ReadFile(filepath.Join(hostDir, name+".key")); !bytes.Equal(k, keyBefore) {
				t.Errorf("%s.key changed", name)
			}
			if code, body := call(t, srv, http.MethodDelete, "/v1/certs/"+name+"/prev", ""); code != http.StatusOK {
				t.Fatalf("DELETE prev: %d %s", code, body)
			}
			if _, err := os.Stat(filepath.Join(hostDir, name+".crt.prev")); !os.IsNotExist(err) {
				t.Errorf(".prev still there after DELETE: %v", err)
			}
		})
	}
}

// TestInstallHostCertRefusals: anything but a renewal of the host's own
// leaf, with its key, signed by the cluster CA and valid now, is refused
// with 400 and one error naming the problem, and nothing is replaced.
func TestInstallHostCertRefusals(t *testing.T) {
	coord, hostDir, srv := hostCertAgent(t)
	now := time.Now()
	server := readCertFile(t, filepath.Join(hostDir, "server.crt"))
	serverKey := readKeyFile(t, filepath.Join(hostDir, "server.key"))
	ca := readCertFile(t, filepath.Join(coord, pki.CACert))
	caKey := readKeyFile(t, filepath.Join(coord, pki.CAKey))
	peerRenewal, _, err := certs.Reissue(coord, pki.Validity{}, readCertFile(t, filepath.Join(hostDir, "peer.crt")), now)
	if err != nil {
		t.Fatal(err)
	}
	serverRenewal, _, err := certs.Reissue(coord, pki.Validity{}, server, now)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherCA := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	otherCADER, err := x509.CreateCertificate(rand.Reader, otherCA, otherCA, &otherKey.PublicKey, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, _ = x509.ParseCertificate(otherCADER)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"the CA", "/v1/certs/ca", string(serverRenewal), "no such certificate"},
		{"an issued client", "/v1/certs/clients%2Fx", string(serverRenewal), "no such certificate"},
		{"a path", "/v1/certs/..%2Fserver", string(serverRenewal), "no such certificate"},
		{"not PEM", "/v1/certs/server", "hello", "does not parse"},
		{"two leaves", "/v1/certs/server", string(serverRenewal) + string(serverRenewal), "is not a CA"},
		{"a foreign CA after the leaf", "/v1/certs/server", string(serverRenewal) + string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCADER})), "none of this host's CAs"},
		{"another leaf's key", "/v1/certs/server", string(peerRenewal), "the key does not match"},
		{"a new key", "/v1/certs/server", string(signCert(t, server.Subject, &otherKey.PublicKey, ca, caKey, now.Add(-time.Minute), now.Add(time.Hour))), "the key does not match"},
		{"another subject (the admin's)", "/v1/certs/server", string(signCert(t, pkix.Name{CommonName: pki.AdminCN, Organization: server.Subject.Organization}, &serverKey.PublicKey, ca, caKey, now.Add(-time.Minute), now.Add(time.Hour))), "not a renewal of this leaf"},
		{"another CA", "/v1/certs/server", string(signCert(t, server.Subject, &serverKey.PublicKey, otherCA, otherKey, now.Add(-time.Minute), now.Add(time.Hour))), "not signed by the cluster CA"},
		{"self-signed", "/v1/certs/server", string(signCert(t, server.Subject, &serverKey.PublicKey, server, serverKey, now.Add(-time.Minute), now.Add(time.Hour))), "not signed by the cluster CA"},
		{"expired", "/v1/certs/server", string(signCert(t, server.Subject, &serverKey.PublicKey, ca, caKey, now.Add(-2*time.Hour), now.Add(-time.Hour))), "not valid now"},
		{"not valid yet", "/v1/certs/server", string(signCert(t, server.Subject, &serverKey.PublicKey, ca, caKey, now.Add(time.Hour), now.Add(2*time.Hour))), "not valid now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotDir(t, hostDir)
			code, body := call(t, srv, http.MethodPut, tc.path, tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("PUT %s: %d %s, want 400 naming %q", tc.path, code, body, tc.want)
			}
			if after := snapshotDir(t, hostDir); !equalSnap(before, after) {
				t.Errorf("files changed after a refusal: %v -> %v", keys(before), keys(after))
			}
		})
	}
}

// TestHostCertsNeedAJoinedHost: an agent with no host certificate
// directory (the coordinator's machine) refuses the endpoints.
func TestHostCertsNeedAJoinedHost(t *testing.T) {
	_, _, srv := apiAgent(t)
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		if code, body := call(t, srv, m, "/v1/certs/server", "x"); code != http.StatusBadRequest || !strings.Contains(body, "holds no host certificates") {
			t.Errorf("%s: %d %s", m, code, body)
		}
	}
}

func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range files(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

func equalSnap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, filepath.Base(k))
	}
	return out
}
