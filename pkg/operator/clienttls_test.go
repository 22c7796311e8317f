package operator

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
)

// testLeaf is a client certificate for key, valid from notBefore to
// notAfter, signed by the CA caPEM/caKeyPEM (PEM; SEC 1 or PKCS #8 key).
func testLeaf(t testing.TB, caPEM, caKeyPEM []byte, key *ecdsa.PrivateKey, notBefore, notAfter time.Time) []byte {
	t.Helper()
	cb, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(caKeyPEM)
	var caKey any
	if caKey, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
		if caKey, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "db-client"},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func parsePEM(t testing.TB, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The decision for NAME-client-tls's certificate, at a fixed clock: the
// renewal point is pkg/certs' (pki.Validity.Due: a third of the lifetime
// before the end by default); what expired, cannot be read or is another
// CA's is issued again; under a CA that expires soon (a user's CA) a
// certificate already lasting as long as the CA is kept, not reissued at
// every reconcile; a rotation reissues it itself.
func TestDecideClientCert(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	v := pki.Validity{Leaf: 90 * day} // renewal margin 30 days
	caPEM, caKey := testCA(t, "db-ca", true, false, now.Add(-day), now.Add(3650*day))
	otherPEM, otherKey := testCA(t, "other-ca", true, false, now.Add(-day), now.Add(3650*day))
	soonPEM, soonKey := testCA(t, "users-ca", true, false, now.Add(-day), now.Add(10*day))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca, caKey []byte, notAfter time.Time) *x509.Certificate {
		return parsePEM(t, testLeaf(t, ca, caKey, key, now.Add(-60*day), notAfter))
	}
	for _, tt := range []struct {
		name     string
		cur      *x509.Certificate
		readErr  error
		ca       []byte
		rotating bool
		want     ClientCertAction
		why      string
	}{
		{name: "fresh", cur: leaf(caPEM, caKey, now.Add(80*day)), ca: caPEM, want: ClientCertFresh, why: "renewed from 2027-01-17T12:00:00Z"},
		{name: "just before the margin", cur: leaf(caPEM, caKey, now.Add(30*day+time.Second)), ca: caPEM, want: ClientCertFresh},
		{name: "at the margin", cur: leaf(caPEM, caKey, now.Add(30*day)), ca: caPEM, want: ClientCertRenew},
		{name: "inside the margin", cur: leaf(caPEM, caKey, now.Add(20*day)), ca: caPEM, want: ClientCertRenew, why: "renewal margin 720h0m0s"},
		{name: "expired", cur: leaf(caPEM, caKey, now.Add(-time.Hour)), ca: caPEM, want: ClientCertReissue, why: "expired at 2026-11-28T11:00:00Z"},
		{name: "missing", readErr: os.ErrNotExist, ca: caPEM, want: ClientCertIssue},
		{name: "unreadable", readErr: fmt.Errorf("%w: no PEM certificate in it", pki.ErrUnparsable), ca: caPEM, want: ClientCertReissue, why: "cannot be used"},
		{name: "another CA's", cur: leaf(otherPEM, otherKey, now.Add(80*day)), ca: caPEM, want: ClientCertReissue, why: `issuer "other-ca"`},
		{name: "in the bundle of a rotation", cur: leaf(otherPEM, otherKey, now.Add(20*day)), ca: append(append([]byte{}, caPEM...), otherPEM...), rotating: true, want: ClientCertKeep, why: "rotation"},
		{name: "signed by the second CA of a bundle", cur: leaf(otherPEM, otherKey, now.Add(80*day)), ca: append(append([]byte{}, caPEM...), otherPEM...), want: ClientCertFresh},
		{name: "CA expiring soon, as long as the CA", cur: leaf(soonPEM, soonKey, now.Add(10*day-time.Minute)), ca: soonPEM, want: ClientCertKeep, why: `the CA "users-ca" expires at 2026-12-08T12:00:00Z`},
		{name: "CA expiring soon, cut at the CA itself", cur: leaf(soonPEM, soonKey, now.Add(10*day)), ca: soonPEM, want: ClientCertKeep, why: "replace the CA"},
		{name: "CA expiring soon, shorter than the CA", cur: leaf(soonPEM, soonKey, now.Add(5*day)), ca: soonPEM, want: ClientCertRenew},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := DecideClientCert(tt.cur, tt.readErr, tt.ca, v, tt.rotating, now)
			if d.Action != tt.want || !strings.Contains(d.Why, tt.why) {
				t.Errorf("got %s (%s), want %s (%q)", d.Action, d.Why, tt.want, tt.why)
			}
			if tt.cur != nil && !d.NotAfter.Equal(tt.cur.NotAfter) {
				t.Errorf("NotAfter %s, want %s", d.NotAfter, tt.cur.NotAfter)
			}
		})
	}
}

// clientTLS reads the Secret db-client-tls.
func clientTLS(t *testing.T, cl client.Client) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db-client-tls"}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// writeClientPair puts a certificate signed by the cluster's CA, valid
// until notAfter, with a new key, in place of db-client's pair.
func writeClientPair(t *testing.T, certDir string, notAfter time.Time) {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := os.ReadFile(filepath.Join(certDir, pki.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt := testLeaf(t, caPEM, caKey, key, notAfter.Add(-365*24*time.Hour), notAfter)
	base := filepath.Join(certDir, pki.ClientsDir, "db-client")
	if err := os.WriteFile(base+".key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".crt", crt, 0o644); err != nil {
		t.Fatal(err)
	}
}

// NAME-client-tls is renewed by the reconcile: a certificate at its
// renewal point, expired or unreadable is replaced by a new certificate
// and key (events ClientCertificateRenewed with the new expiry; a
// Warning ClientCertificateUnusable first for the expired and the
// unreadable), the Secret updated in place with the same keys, and a
// fresh certificate left alone. When the Secret's update fails, the pair
// it holds is still on disk (kept beside the new one) until an update
// succeeds.
func TestReconcileRenewsClientCert(t *testing.T) {
	ec := testCluster()
	r, cl, rec, failUpdates := clientTLSReconciler(t, ec)
	ctx := t.Context()
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	dir := StateDir(r.Config.StateDir, ec)
	certDir := filepath.Join(dir, "pki")
	first := clientTLS(t, cl)
	if sawEvent(rec, ReasonClientCertRenewed) {
		t.Error("a new cluster's first certificate was reported as renewed")
	}
	caPEM, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	prev := func() bool {
		_, err := os.Stat(filepath.Join(certDir, pki.ClientsDir, "db-client.crt"+pki.PrevSuffix))
		return err == nil
	}
	// checkRenewed: the Secret holds a new pair, valid for the leaf
	// lifetime, issued by the cluster's CA, the same keys and ca.crt; the
	// kept pair is gone; the events say so.
	checkRenewed := func(before *corev1.Secret, warning string) *corev1.Secret {
		t.Helper()
		s := clientTLS(t, cl)
		if len(s.Data) != 3 || !bytes.Equal(s.Data["ca.crt"], caPEM) {
			t.Errorf("Secret keys %d, ca.crt the cluster's: %v", len(s.Data), bytes.Equal(s.Data["ca.crt"], caPEM))
		}
		if bytes.Equal(s.Data["tls.crt"], before.Data["tls.crt"]) || bytes.Equal(s.Data["tls.key"], before.Data["tls.key"]) {
			t.Fatal("the Secret still holds the previous certificate or key")
		}
		c := parsePEM(t, s.Data["tls.crt"])
		if left := time.Until(c.NotAfter); left < 360*24*time.Hour {
			t.Errorf("the new certificate expires in %s", left)
		}
		if c.CheckSignatureFrom(parsePEM(t, caPEM)) != nil {
			t.Error("the new certificate is not the cluster CA's")
		}
		if prev() {
			t.Error("the previous pair is still kept once the Secret holds the new one")
		}
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		all := strings.Join(got, "\n")
		if !strings.Contains(all, "Normal "+ReasonClientCertRenewed) || !strings.Contains(all, c.NotAfter.UTC().Format(time.RFC3339)) {
			t.Errorf("no event %s with the new expiry %s:\n%s", ReasonClientCertRenewed, c.NotAfter.UTC().Format(time.RFC3339), all)
		}
		if warning != "" {
			w := strings.Index(all, "Warning "+ReasonClientCertUnusable)
			if w < 0 || !strings.Contains(all[w:], warning) || w > strings.Index(all, ReasonClientCertRenewed) {
				t.Errorf("no Warning %s (%s) before the renewal:\n%s", ReasonClientCertUnusable, warning, all)
			}
		}
		return s
	}

	// Fresh: nothing changes.
	reconcile()
	if s := clientTLS(t, cl); !bytes.Equal(s.Data["tls.crt"], first.Data["tls.crt"]) || sawEvent(rec, ReasonClientCertRenewed) {
		t.Error("a fresh certificate was renewed")
	}

	// Inside the renewal margin (a third of a year by default).
	writeClientPair(t, certDir, time.Now().Add(100*24*time.Hour))
	reconcile()
	s := checkRenewed(first, "")

	// Expired.
	writeClientPair(t, certDir, time.Now().Add(-time.Minute))
	reconcile()
	s = checkRenewed(s, "expired at")

	// Unreadable.
	if err := os.WriteFile(filepath.Join(certDir, pki.ClientsDir, "db-client.crt"), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	reconcile()
	s = checkRenewed(s, "cannot be used")

	// The Secret's update fails: the pair it holds stays on disk beside
	// the new one, and the next reconcile publishes the new one. (The
	// Secret first holds the pair on disk, as after any renewal.)
	writeClientPair(t, certDir, time.Now().Add(10*24*time.Hour))
	crtFile, keyFile := filepath.Join(certDir, pki.ClientsDir, "db-client.crt"), filepath.Join(certDir, pki.ClientsDir, "db-client.key")
	published := clientTLS(t, cl)
	published.Data["tls.crt"], _ = os.ReadFile(crtFile)
	published.Data["tls.key"], _ = os.ReadFile(keyFile)
	if err := cl.Update(ctx, published); err != nil {
		t.Fatal(err)
	}
	*failUpdates = true
	reconcile()
	held := clientTLS(t, cl)
	if !bytes.Equal(held.Data["tls.crt"], published.Data["tls.crt"]) {
		t.Fatal("the Secret changed although its update failed")
	}
	keptCrt, _ := os.ReadFile(crtFile + pki.PrevSuffix)
	keptKey, _ := os.ReadFile(keyFile + pki.PrevSuffix)
	if !bytes.Equal(keptCrt, held.Data["tls.crt"]) || !bytes.Equal(keptKey, held.Data["tls.key"]) {
		t.Fatal("the pair the Secret holds is not kept on disk while its update fails")
	}
	if cur, _ := os.ReadFile(crtFile); bytes.Equal(cur, held.Data["tls.crt"]) {
		t.Fatal("the certificate was not renewed on disk")
	}
	if st, err := os.Stat(keyFile + pki.PrevSuffix); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kept key: %v %v", st, err)
	}
	// Due again before any update went through: the kept pair stays the
	// Secret's.
	writeClientPair(t, certDir, time.Now().Add(10*24*time.Hour))
	reconcile()
	if again, _ := os.ReadFile(crtFile + pki.PrevSuffix); !bytes.Equal(again, held.Data["tls.crt"]) {
		t.Error("a second failed update replaced the kept pair")
	}
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	*failUpdates = false
	reconcile()
	s = checkRenewed(held, "")

	// On a started cluster (no operation running) the renewal is the
	// last operation. (Here the pods never run: every reconcile reports
	// Create waiting for them, so the steps are called directly.)
	c, err := cluster.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeClientPair(t, certDir, time.Now().Add(10*24*time.Hour))
	r.ops = map[string]*v1alpha1.Operation{}
	if err := r.ensureClientCert(ctx, ec, c); err != nil {
		t.Fatal(err)
	}
	if err := r.publishedClientCert(ec, c); err != nil {
		t.Fatal(err)
	}
	if op := r.op(ec); op == nil || op.Type != "RenewCertificates" || op.State != "Succeeded" || !strings.Contains(op.Description, "db-client-tls") {
		t.Errorf("last operation %+v", op)
	}
}

// CertificatesReady says when NAME-client-tls expires and is renewed.
func TestStatusClientCertNote(t *testing.T) {
	ec := testCluster()
	dir := filepath.Join(t.TempDir(), "prod", "db")
	c, _, err := initDir(t.Context(), dir, ec, InitOptions(ec, "", "", false), nil)
	if err != nil {
		t.Fatal(err)
	}
	if note := clientCertNote(ec, c, time.Now()); note != "Secret db-client-tls: no client certificate was issued yet" {
		t.Errorf("before it is issued: %q", note)
	}
	d, err := CheckClientCert(ec, c, time.Now())
	if err != nil || d.Action != ClientCertIssue {
		t.Fatalf("%+v %v", d, err)
	}
	notAfter, err := IssueClientCert(t.Context(), ec, c, d)
	if err != nil {
		t.Fatal(err)
	}
	note := clientCertNote(ec, c, time.Now())
	want := fmt.Sprintf("Secret db-client-tls expires at %s and is renewed from %s", notAfter.UTC().Format(time.RFC3339),
		notAfter.Add(-c.Validity().WithDefaults().RenewBefore).UTC().Format(time.RFC3339))
	if note != want {
		t.Errorf("note %q, want %q", note, want)
	}
	st := threeMembers()
	out := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: st, ClientCert: note}, time.Now())
	if cond := meta.FindStatusCondition(out.Conditions, v1alpha1.ConditionCertificatesReady); cond == nil || cond.Status != metav1.ConditionTrue ||
		cond.Message != "ok; "+want {
		t.Errorf("CertificatesReady %+v", cond)
	}
}

// The CA file DecideClientCert reads (ca.crt of the directory, a bundle
// during a rotation) is whatever is on disk: any bytes give a decision,
// never a panic, and Fresh or Renew only for a CA that signed the
// certificate.
func FuzzDecideClientCert(f *testing.F) {
	now := time.Now()
	caPEM, caKey := testCA(f, "db-ca", true, false, now.Add(-time.Hour), now.Add(3650*24*time.Hour))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	cur := parsePEM(f, testLeaf(f, caPEM, caKey, key, now.Add(-time.Hour), now.Add(300*24*time.Hour)))
	f.Add(caPEM)
	f.Add(append(append([]byte{}, caPEM...), caPEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := DecideClientCert(cur, nil, b, pki.Validity{}, false, now)
		switch d.Action {
		case ClientCertFresh, ClientCertRenew, ClientCertKeep:
			if signerIn(cur, b) == nil {
				t.Fatalf("%s without a CA that signed it", d.Action)
			}
		case ClientCertReissue:
		default:
			t.Fatalf("action %q", d.Action)
		}
	})
}

// The copy of NAME-client-tls's pair an older operator kept
// (clients-out/NAME-client.{crt,key}, ca.crt), which nothing reads, is
// removed once the Secret holds the current pair, never before: while
// the Secret's update fails it stays.
func TestStaleClientCopyRemoved(t *testing.T) {
	ec := testCluster()
	r, cl, _, failUpdates := clientTLSReconciler(t, ec)
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}); err != nil {
			t.Fatal(err)
		}
	}
	reconcile()
	dir := StateDir(r.Config.StateDir, ec)
	certDir := filepath.Join(dir, "pki")
	// What an older operator left: a 0600 copy of the key.
	out := filepath.Join(dir, "clients-out")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	for f, mode := range map[string]os.FileMode{"db-client.key": 0o600, "db-client.crt": 0o644, "ca.crt": 0o644} {
		if err := os.WriteFile(filepath.Join(out, f), []byte("old "+f), mode); err != nil {
			t.Fatal(err)
		}
	}
	// A renewal whose Secret update fails: the copy stays.
	writeClientPair(t, certDir, time.Now().Add(10*24*time.Hour))
	*failUpdates = true
	reconcile()
	if _, err := os.Stat(filepath.Join(out, "db-client.key")); err != nil {
		t.Fatalf("the copy was removed before the Secret held the current pair: %v", err)
	}
	*failUpdates = false
	reconcile()
	s := clientTLS(t, cl)
	onDisk, _ := os.ReadFile(filepath.Join(certDir, pki.ClientsDir, "db-client.key"))
	if !bytes.Equal(s.Data["tls.key"], onDisk) {
		t.Fatal("the Secret does not hold the current key")
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale copy is still there once the Secret holds the current pair: %v", err)
	}
	// Nothing to remove: a reconcile goes on as usual.
	reconcile()
}

// clientTLSReconciler is a reconciler of ec on a fake API whose updates of
// the Secret db-client-tls fail while *failUpdates is true.
func clientTLSReconciler(t *testing.T, ec *v1alpha1.EtcdCluster) (*Reconciler, client.WithWatch, *events.FakeRecorder, *bool) {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	failUpdates := new(bool)
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ec).WithStatusSubresource(&v1alpha1.EtcdCluster{}).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && *failUpdates && obj.GetName() == "db-client-tls" {
				return errors.New("the API server is away")
			}
			return c.Update(ctx, obj, opts...)
		}}).Build()
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, Recorder: rec, Config: Config{StateDir: t.TempDir(), MemberImage: "steward.etcd.io/steward:t", ClusterDomain: "cluster.local"},
		ops: map[string]*v1alpha1.Operation{}}
	return r, cl, rec, failUpdates
}
