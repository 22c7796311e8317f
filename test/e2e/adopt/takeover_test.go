package adopt_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// takeOverCerts runs `steward certs take-over` on the fully adopted
// cluster of e (the foreign cluster f, whose member list was before): the
// bad inputs first (no --yes, the key of another CA, a CA that did not sign
// the members), each refused in one line with pki/, the spec and the
// operator's files unchanged; then the take-over with f's CA, killed after
// the second member's restart and resumed with `plan resume`: member and
// cluster IDs unchanged, every member's client and peer ports serve the
// certificates of Steward's pki/ (issuer: f's CA), the spec names none of
// the operator's files, `certs renew --all` changes the served serials and
// `certs issue-client` works. The caller's writer runs throughout.
func takeOverCerts(t *testing.T, e *harness.Env, f *harness.ForeignCluster, before *etcdserverpb.MemberListResponse) {
	t.Helper()
	dirFiles := func(dir string) map[string]string {
		out := map[string]string{}
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				out[p] = string(b)
			}
			return nil
		})
		return out
	}
	pkiDir := filepath.Join(e.Dir, "pki")
	prePKI, preOperator, preSpec := dirFiles(pkiDir), dirFiles(filepath.Join(f.Dir, "pki")), e.Spec()
	other, err := harness.WriteForeignPKI(t.TempDir(), "other-client")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no consent", []string{"--ca-cert", f.CAFile, "--ca-key", f.CAKeyFile}, "add --yes"},
		{"the key of another CA", []string{"--ca-cert", f.CAFile, "--ca-key", other.CAKey, "--yes"}, "does not match"},
		{"a CA that did not sign the members", []string{"--ca-cert", other.CA, "--ca-key", other.CAKey, "--yes"}, "was not signed by"},
	} {
		msg := e.MustFail(append([]string{"certs", "take-over"}, c.args...)...)
		if !strings.Contains(msg, c.want) || (c.name != "no consent" && strings.Count(strings.TrimSpace(msg), "\n") > 0) {
			t.Errorf("take-over with %s: want one error saying %q, got:\n%s", c.name, c.want, msg)
		}
		if got := dirFiles(pkiDir); !maps.Equal(got, prePKI) {
			t.Errorf("take-over with %s changed pki/: %v, was %v", c.name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(prePKI)))
		}
		if sp := e.Spec(); !reflect.DeepEqual(sp, preSpec) {
			t.Errorf("take-over with %s changed the spec", c.name)
		}
	}

	// Killed after the second member's restart, before the step is
	// recorded done: `plan resume` finishes it (the step finds the member
	// serving Steward's certificate and goes on).
	_, se, err := e.RunEnv([]string{"STEWARD_CRASHPOINT=plan-step-after:1"}, "certs", "take-over", "--ca-cert", f.CAFile, "--ca-key", f.CAKeyFile, "--yes")
	if err == nil || !strings.Contains(se, "crashpoint: plan-step-after:1") {
		t.Fatalf("take-over with a crash point after the second member's switch: %v\n%s", err, se)
	}
	if !e.Spec().OperatorCerts() {
		t.Fatal("the take-over killed halfway recorded its end in the spec")
	}
	e.MustRun("plan", "resume")

	fcli := f.MustClient()
	after, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId {
		t.Errorf("cluster ID %x after the take-over, want %x", after.Header.ClusterId, before.Header.ClusterId)
	}
	for _, m := range before.Members {
		if !slices.ContainsFunc(after.Members, func(u *etcdserverpb.Member) bool { return u.ID == m.ID && u.Name == m.Name }) {
			t.Errorf("member %s (%x) is gone after the take-over: %v", m.Name, m.ID, after.Members)
		}
	}
	sp := e.Spec()
	if sp.OperatorCerts() || sp.External == nil || sp.External.ClusterID != preSpec.External.ClusterID || !sp.AllAdopted() {
		t.Errorf("after the take-over the spec still names the operator's files or lost its adoption: external %+v", sp.External)
	}
	for _, m := range sp.Members {
		if m.Adopted.TLS != nil {
			t.Errorf("member %s: adopted.tls %+v after the take-over", m.Name, m.Adopted.TLS)
		}
	}
	if got := dirFiles(filepath.Join(f.Dir, "pki")); !maps.Equal(got, preOperator) {
		t.Errorf("the take-over changed the operator's files")
	}
	if st, err := os.Stat(filepath.Join(pkiDir, pki.CAKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("pki/ca.key: %v, mode %v; want 0600", err, st.Mode())
	}
	if st, err := os.Stat(pkiDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("pki/: %v, mode %v; want 0700", err, st.Mode())
	}
	opCA := harness.ReadCert(t, f.CAFile)
	files := pki.FilesIn(pkiDir)
	served := servedSerials(t, sp, files, opCA)
	want := map[string]string{"client": serialOf(t, files.ServerCert), "peer": serialOf(t, files.PeerCert)}
	for k, s := range served {
		if s != want[k[strings.LastIndex(k, " ")+1:]] {
			t.Errorf("%s serves serial %s, want Steward's %s (pki/)", k, s, want[k[strings.LastIndex(k, " ")+1:]])
		}
	}

	// Steward's from now on: renewals change what the members serve, and
	// client certificates are issued from the operator's CA.
	e.MustRun("certs", "renew", "--all")
	renewed := servedSerials(t, e.Spec(), files, opCA)
	for k, s := range renewed {
		if s == served[k] {
			t.Errorf("%s still serves serial %s after `certs renew --all`", k, s)
		}
	}
	e.MustRun("certs", "issue-client", "kube-apiserver")
	if err := harness.ReadCert(t, filepath.Join(pkiDir, "clients", "kube-apiserver.crt")).CheckSignatureFrom(opCA); err != nil {
		t.Errorf("the issued client certificate is not of the operator's CA: %v", err)
	}
	// The peer certificate keeps the operator's peer name, which every
	// peer port lets in: no client may have it.
	peerCN, _, err := pki.CertNames(files.PeerCert)
	if err != nil {
		t.Fatal(err)
	}
	if msg := e.MustFail("certs", "issue-client", peerCN); !strings.Contains(msg, "invalid client name") {
		t.Errorf("issue-client %s (the peer certificate's name): %s", peerCN, msg)
	}
}

// servedSerials reads, in live handshakes, the serial of the certificate
// each member's client and peer port serves ("NAME client", "NAME peer"),
// each verified against ca.
func servedSerials(t *testing.T, sp *spec.Cluster, f pki.Files, ca *x509.Certificate) map[string]string {
	t.Helper()
	client, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	peer, err := tls.LoadX509KeyPair(f.PeerCert, f.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range sp.Members {
		for _, p := range []struct {
			what, url string
			cert      *tls.Certificate
		}{{"client", m.ClientURL, &client}, {"peer", m.PeerURL, &peer}} {
			c, err := harness.ServedBy(t, p.url, ca, p.cert)
			if err != nil || c == nil {
				t.Errorf("member %s %s port %s: %v", m.Name, p.what, p.url, err)
				continue
			}
			if c.Issuer.CommonName != ca.Subject.CommonName {
				t.Errorf("member %s %s port serves a certificate of %q, want the operator's CA %q", m.Name, p.what, c.Issuer.CommonName, ca.Subject.CommonName)
			}
			out[m.Name+" "+p.what] = fmt.Sprintf("%x", c.SerialNumber)
		}
	}
	return out
}

func serialOf(t *testing.T, path string) string {
	t.Helper()
	s, err := pki.Serial(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
