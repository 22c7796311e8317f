package agent

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/pki"
)

// TestHostCARotation: a joined host's side of a CA rotation over its
// agent's API, in the plan's order: the bundle of both CAs installed
// (PUT /v1/ca), every host leaf reissued by the new CA and installed with
// the cross-signed CA after it, then the new CA alone; a bundle that would
// leave a host leaf untrusted is refused and replaces nothing; the same
// bundle twice changes nothing the second time.
func TestHostCARotation(t *testing.T) {
	coord, hostDir, srv := hostCertAgent(t)
	oldCA := readCertFile(t, filepath.Join(coord, pki.CACert))
	if err := certs.RotationPrepare(coord, "c", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	next := readCertFile(t, filepath.Join(coord, pki.CANextCert))
	newOnly := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: next.Raw}))
	putCA := func(body string) (int, agentapi.TrustBundle, string) {
		t.Helper()
		code, out := call(t, srv, http.MethodPut, "/v1/ca", body)
		var r agentapi.TrustBundle
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatal(err)
			}
		}
		return code, r, out
	}
	refused := func(what, body, want string) {
		t.Helper()
		before := snapshotDir(t, hostDir)
		if code, _, out := putCA(body); code != http.StatusBadRequest || !strings.Contains(out, want) {
			t.Errorf("%s: %d %s, want 400 naming %q", what, code, out, want)
		}
		if after := snapshotDir(t, hostDir); !equalSnap(before, after) {
			t.Errorf("%s: files changed after a refusal", what)
		}
	}
	// Before the leaves are reissued the new CA alone would lock the host
	// out of its own leaves.
	refused("the new CA alone before the reissue", newOnly, "reissue the host's leaves from the new CA")
	refused("not PEM", "hello", "does not parse")
	refused("no certificate", "", "holds 0 certificates")
	refused("a leaf", string(mustRead(t, filepath.Join(hostDir, "server.crt"))), "is not a CA certificate")

	// Step 1: both CAs.
	if err := certs.RotationTrustBoth(coord); err != nil {
		t.Fatal(err)
	}
	both := string(mustRead(t, filepath.Join(coord, pki.CACert)))
	code, r, out := putCA(both)
	if code != http.StatusOK || !r.Changed || len(r.CAs) != 2 {
		t.Fatalf("PUT both: %d %s", code, out)
	}
	if got := string(mustRead(t, filepath.Join(hostDir, pki.CACert))); got != both {
		t.Errorf("host ca.crt is not the bundle sent")
	}
	if fi, err := os.Stat(filepath.Join(hostDir, pki.CACert)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("host ca.crt: %v %v, want mode 0600", fi.Mode(), err)
	}
	if code, r, out := putCA(both); code != http.StatusOK || r.Changed {
		t.Errorf("PUT both again: %d %s, want unchanged", code, out)
	}

	// Step 2: every host leaf reissued by the new CA, its key kept.
	for _, name := range pki.HostLeafNames {
		code, body := call(t, srv, http.MethodGet, "/v1/certs/"+name, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", name, code, body)
		}
		var f agentapi.CertFile
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			t.Fatal(err)
		}
		cur, _, err := pki.ParseLeafChainPEM([]byte(f.PEM))
		if err != nil {
			t.Fatal(err)
		}
		certPEM, nc, done, err := certs.RotationReissueHost(coord, pki.Validity{}, cur, time.Now())
		if err != nil || done {
			t.Fatalf("reissue %s: done %v, %v", name, done, err)
		}
		if code, body := call(t, srv, http.MethodPut, "/v1/certs/"+name, string(certPEM)); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", name, code, body)
		}
		leaf, chain, err := pki.ParseLeafChainPEM(mustRead(t, filepath.Join(hostDir, name+".crt")))
		if err != nil {
			t.Fatal(err)
		}
		if leaf.SerialNumber.Cmp(nc.SerialNumber) != 0 || len(chain) != 1 {
			t.Fatalf("%s.crt: serial %x and %d CA certificates after it, want %x and the cross-signed CA", name, leaf.SerialNumber, len(chain), nc.SerialNumber)
		}
		// Whoever trusts the old CA alone (a member started before the
		// rotation) verifies it through the cross-signed CA.
		inter := x509.NewCertPool()
		inter.AddCert(chain[0])
		for what, root := range map[string]*x509.Certificate{"old": oldCA, "new": next} {
			roots := x509.NewCertPool()
			roots.AddCert(root)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("%s: not verified by the %s CA: %v", name, what, err)
			}
		}
		// A re-run finds it done.
		if _, _, done, err := certs.RotationReissueHost(coord, pki.Validity{}, leaf, time.Now()); err != nil || !done {
			t.Errorf("reissue %s again: done %v, %v", name, done, err)
		}
	}

	// Step 4: the new CA alone.
	if err := certs.RotationDrop(coord); err != nil {
		t.Fatal(err)
	}
	if code, r, out := putCA(string(mustRead(t, filepath.Join(coord, pki.CACert)))); code != http.StatusOK || !r.Changed || len(r.CAs) != 1 {
		t.Fatalf("PUT new CA: %d %s", code, out)
	}
	// A bundle of the old CA alone is refused now: the leaves are the new CA's.
	refused("the old CA alone after the reissue", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: oldCA.Raw})), "was not signed by a CA of the bundle")
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
