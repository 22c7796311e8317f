package operator

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// testCA is a CA certificate and key in PEM: an ECDSA CA valid from
// notBefore to notAfter, isCA as given (a leaf otherwise), with an RSA key
// when rsaKey.
func testCA(t testing.TB, cn string, isCA, rsaKey bool, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	var pub, priv any
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub, priv = &k.PublicKey, k
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub, priv = &k.PublicKey, k
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn},
		NotBefore: notBefore, NotAfter: notAfter, BasicConstraintsValid: true, IsCA: isCA,
		KeyUsage: x509.KeyUsageDigitalSignature}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

// The Secret's CA is taken from tls.crt/tls.key (or ca.crt/ca.key) when
// it is one ECDSA CA valid now with its key; every other Secret is refused
// naming the Secret, its keys and what is wrong, never the key itself.
func TestCAFromSecret(t *testing.T) {
	now := time.Now()
	crt, key := testCA(t, "users-ca", true, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	otherCrt, _ := testCA(t, "other-ca", true, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	leafCrt, leafKey := testCA(t, "a-leaf", false, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	oldCrt, oldKey := testCA(t, "old-ca", true, false, now.Add(-48*time.Hour), now.Add(-time.Hour))
	newCrt, newKey := testCA(t, "future-ca", true, false, now.Add(time.Hour), now.Add(48*time.Hour))
	rsaCrt, rsaKey := testCA(t, "rsa-ca", true, true, now.Add(-time.Hour), now.Add(24*time.Hour))
	for _, tc := range []struct {
		name string
		data map[string][]byte
		want string // "" when taken
	}{
		{"tls keys", map[string][]byte{"tls.crt": crt, "tls.key": key}, ""},
		{"ca keys", map[string][]byte{"ca.crt": crt, "ca.key": key}, ""},
		{"no key", map[string][]byte{"tls.crt": crt}, "Secret users has no key tls.key (or ca.key): the CA's private key"},
		{"no certificate", map[string][]byte{"tls.key": key}, "Secret users has no key tls.crt (or ca.crt): the CA certificate"},
		{"empty", map[string][]byte{}, "has no key tls.crt (or ca.crt): the CA certificate and no key tls.key"},
		{"not a CA", map[string][]byte{"tls.crt": leafCrt, "tls.key": leafKey}, "Secret users key tls.crt (a-leaf): not a CA certificate: it may not sign certificates"},
		{"expired", map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey}, "the CA in Secret users (old-ca) expired at"},
		{"not yet valid", map[string][]byte{"tls.crt": newCrt, "tls.key": newKey}, "(future-ca) is not valid before"},
		{"rsa", map[string][]byte{"tls.crt": rsaCrt, "tls.key": rsaKey}, "the CA key is not an ECDSA key"},
		{"another's key", map[string][]byte{"tls.crt": otherCrt, "tls.key": key}, "Secret users key tls.key: the key does not match"},
		{"two certificates", map[string][]byte{"tls.crt": append(append([]byte{}, crt...), otherCrt...), "tls.key": key}, "it holds 2 certificates"},
		{"not PEM", map[string][]byte{"tls.crt": []byte("hello"), "tls.key": key}, "it holds 0 certificates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := CAFromSecret("users", tc.data, now)
			if tc.want == "" {
				if err != nil || ca == nil || ca.Cert.Subject.CommonName != "users-ca" {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrCARefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if err != nil && bytes.Contains([]byte(err.Error()), bytes.TrimSpace(key)[40:80]) {
				t.Errorf("the error holds the key: %v", err)
			}
		})
	}
}

// The user's CA issues every certificate of the cluster: it is the
// directory's CA, NAME-ca's ca.crt, and it signed the members' and the
// applications' certificates; its key is in no Secret. A Secret whose CA
// is later replaced is refused (CARefused) with nothing changed.
func TestReconcileUserCA(t *testing.T) {
	now := time.Now()
	crt, key := testCA(t, "users-ca", true, false, now.Add(-time.Hour), now.Add(365*24*time.Hour))
	ec := testCluster()
	ec.Spec.TLS.CASecret = "users-ca"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "users-ca", Namespace: "prod"}, Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}
	r, cl := newReconciler(t, ec, sec)
	ctx := t.Context()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	dir := StateDir(r.Config.StateDir, ec)
	if _, err := os.Stat(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatalf("no cluster made: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(crt)
	verify := func(what string, p []byte, usage x509.ExtKeyUsage) {
		t.Helper()
		b, _ := pem.Decode(p)
		if b == nil {
			t.Errorf("%s: no certificate", what)
			return
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err == nil {
			_, err = c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
		}
		if err != nil {
			t.Errorf("%s is not issued by the user's CA: %v", what, err)
		}
	}
	installed, err := os.ReadFile(filepath.Join(dir, "pki", pki.CACert))
	if err != nil || !sameCertificate(installed, crt) {
		t.Errorf("the directory's CA is not the user's: %v", err)
	}
	for _, f := range []string{pki.ServerCert, pki.PeerCert} {
		b, err := os.ReadFile(filepath.Join(dir, "pki", f))
		if err != nil {
			t.Fatal(err)
		}
		verify(f, b, x509.ExtKeyUsageServerAuth)
	}
	var caSec, clientTLS corev1.Secret
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-ca"}, &caSec)
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-client-tls"}, &clientTLS)
	if !sameCertificate(caSec.Data["ca.crt"], crt) || !sameCertificate(clientTLS.Data["ca.crt"], crt) {
		t.Error("db-ca or db-client-tls does not carry the user's CA")
	}
	verify("db-client-tls", clientTLS.Data["tls.crt"], x509.ExtKeyUsageClientAuth)
	var join corev1.Secret
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-join"}, &join)
	if !bytes.Contains(join.Data["db-0.yaml"], []byte("kind: JoinFile")) {
		t.Errorf("join file %q", join.Data["db-0.yaml"])
	}
	caKey, err := os.ReadFile(filepath.Join(dir, "pki", pki.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db-ca", "db-join", "db-client-tls", "db-backup-key"} {
		var s corev1.Secret
		_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: name}, &s)
		for k, v := range s.Data {
			if bytes.Contains(v, bytes.TrimSpace(caKey)) || bytes.Contains(v, bytes.TrimSpace(key)) {
				t.Errorf("Secret %s key %s holds the CA key", name, k)
			}
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "pki", pki.CAKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("CA key file: %v %v", st, err)
	}

	// The Secret now holds another CA: refused in a Warning event,
	// nothing rewritten, and the reconcile goes on (a running cluster
	// issues from its copy: its status, members and recovery are not held
	// back by the Secret).
	other, otherKey := testCA(t, "next-ca", true, false, now.Add(-time.Hour), now.Add(365*24*time.Hour))
	sec.Data = map[string][]byte{"tls.crt": other, "tls.key": otherKey}
	if err := cl.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	r.Recorder = rec
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	_ = cl.Get(ctx, req.NamespacedName, &got)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason == ReasonCARefused {
		t.Errorf("Ready %+v: the reconcile stopped at the CA", c)
	}
	if !sawEvent(rec, "Warning CARefused", "no longer holds the CA the cluster was created with") {
		t.Error("no Warning event CARefused for the changed CA")
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "pki", pki.CACert)); !bytes.Equal(now, installed) {
		t.Error("the directory's CA was replaced")
	}
	var join2 corev1.Secret
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-join"}, &join2)
	if !bytes.Equal(join2.Data["db-0.yaml"], join.Data["db-0.yaml"]) {
		t.Error("the join files were rewritten")
	}
}

// A Secret that is missing, lacks a key, holds no CA or an expired one:
// the cluster is not made (Ready False, reason CARefused; no spec, no CA
// of the operator's own, no StatefulSet).
func TestReconcileRefusesBadCA(t *testing.T) {
	now := time.Now()
	crt, _ := testCA(t, "users-ca", true, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	leaf, leafKey := testCA(t, "a-leaf", false, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	old, oldKey := testCA(t, "old-ca", true, false, now.Add(-48*time.Hour), now.Add(-time.Hour))
	for _, tc := range []struct {
		name string
		data map[string][]byte // nil: no Secret
		want string
	}{
		{"missing", nil, "there is no Secret users-ca"},
		{"no key", map[string][]byte{"tls.crt": crt}, "has no key tls.key"},
		{"not a CA", map[string][]byte{"tls.crt": leaf, "tls.key": leafKey}, "not a CA certificate"},
		{"expired", map[string][]byte{"tls.crt": old, "tls.key": oldKey}, "expired at"},
		{"another's key", map[string][]byte{"tls.crt": crt, "tls.key": oldKey}, "the key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := testCluster()
			ec.Spec.TLS.CASecret = "users-ca"
			r, cl := newReconciler(t, ec)
			if tc.data != nil {
				if err := cl.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "users-ca", Namespace: "prod"}, Data: tc.data}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Reconcile(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.EtcdCluster
			_ = cl.Get(t.Context(), req.NamespacedName, &got)
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonCARefused || !strings.Contains(c.Message, tc.want) {
				t.Errorf("Ready %+v", c)
			}
			dir := StateDir(r.Config.StateDir, ec)
			for _, f := range []string{spec.FileName, filepath.Join("pki", pki.CACert), filepath.Join("pki", pki.CAKey)} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					t.Errorf("%s written for a refused CA", f)
				}
			}
			var ss appsv1.StatefulSet
			if err := cl.Get(t.Context(), req.NamespacedName, &ss); err == nil {
				t.Error("a StatefulSet was made for a refused CA")
			}
		})
	}
}

// A CA that ends within the leaves' renewal margin is warned about.
func TestCAExpiryWarning(t *testing.T) {
	now := time.Now()
	soon, _ := testCA(t, "soon-ca", true, false, now.Add(-time.Hour), now.Add(30*24*time.Hour))
	later, _ := testCA(t, "later-ca", true, false, now.Add(-time.Hour), now.Add(5*365*24*time.Hour))
	parse := func(p []byte) *x509.Certificate {
		b, _ := pem.Decode(p)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if w := CAExpiryWarning(parse(soon), now); !strings.Contains(w, "the CA soon-ca expires at") || !strings.Contains(w, "renewal margin") {
		t.Errorf("warning %q", w)
	}
	if w := CAExpiryWarning(parse(later), now); w != "" {
		t.Errorf("warning for a CA of five years: %q", w)
	}
}

// FuzzCAFromSecret: whatever a Secret holds, CAFromSecret returns a CA
// valid now, or an error that wraps ErrCARefused; it never panics.
func FuzzCAFromSecret(f *testing.F) {
	now := time.Now()
	crt, key := testCA(f, "users-ca", true, false, now.Add(-time.Hour), now.Add(24*time.Hour))
	f.Add(crt, key)
	f.Add(crt[:len(crt)/2], key)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), []byte{})
	f.Fuzz(func(t *testing.T, c, k []byte) {
		ca, err := CAFromSecret("s", map[string][]byte{"tls.crt": c, "tls.key": k}, now)
		if err != nil {
			if !errors.Is(err, ErrCARefused) {
				t.Fatalf("error not wrapping ErrCARefused: %v", err)
			}
			return
		}
		if ca == nil || !ca.Cert.IsCA || now.After(ca.Cert.NotAfter) || now.Before(ca.Cert.NotBefore) {
			t.Fatalf("took %+v", ca)
		}
	})
}
