package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"
)

// testCA is a CA valid from notBefore to notAfter.
func testCA(t *testing.T, cn string, notBefore, notAfter time.Time) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

// TestCALimit: the one rule (AtCALimit) that keeps a renewal from
// reissuing, round after round, a leaf that already ends as late as its
// CA allows, at a fixed clock: a CA expiring in 10 days with a year's leaf
// lifetime gives a leaf cut CACut before the CA, due at once, renewed once
// and then not again; once the CA is rotated it is renewed.
func TestCALimit(t *testing.T) {
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	v := Validity{}.WithDefaults() // a year's leaves, renewed a third before
	soon, soonKey := testCA(t, "soon", now.Add(-365*24*time.Hour), now.Add(10*24*time.Hour))
	later, laterKey := testCA(t, "rotated", now.Add(-time.Hour), now.Add(10*365*24*time.Hour))
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, lifetime time.Duration, at time.Time) *x509.Certificate {
		t.Helper()
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "c-server"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := reissue(tmpl, &leafKey.PublicKey, ca, caKey, lifetime, at)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	if got, want := LeafNotAfter(soon, v.Leaf, now), soon.NotAfter.Add(-CACut); !got.Equal(want) {
		t.Errorf("LeafNotAfter under a CA expiring soon = %s, want %s", got, want)
	}
	if got, want := LeafNotAfter(later, v.Leaf, now), now.Add(v.Leaf); !got.Equal(want) {
		t.Errorf("LeafNotAfter under a CA of 10 years = %s, want %s", got, want)
	}
	cut := issue(soon, soonKey, v.Leaf, now)
	if !cut.NotAfter.Equal(soon.NotAfter.Add(-CACut)) {
		t.Fatalf("leaf under the CA expiring soon ends %s, want a minute before the CA (%s)", cut.NotAfter, soon.NotAfter)
	}
	// A leaf issued before this fix was cut at the CA's expiry itself.
	atCA := issue(soon, soonKey, v.Leaf, now)
	atCA.NotAfter = soon.NotAfter
	short := issue(soon, soonKey, 5*24*time.Hour, now) // ends 5 days before the CA

	for _, tc := range []struct {
		name    string
		leaf    *x509.Certificate
		ca      *x509.Certificate
		at      time.Time
		due     bool
		atLimit bool // renewing it gives no later expiry: not renewed
	}{
		{"cut leaf right after issue", cut, soon, now, true, true},
		{"cut leaf a round later", cut, soon, now.Add(time.Minute), true, true},
		{"cut leaf a week later", cut, soon, now.Add(7 * 24 * time.Hour), true, true},
		{"leaf cut at the CA's expiry (older releases)", atCA, soon, now.Add(time.Hour), true, true},
		{"leaf ending days before the CA", short, soon, now, true, false},
		{"cut leaf, CA rotated", cut, later, now.Add(time.Hour), true, false},
		{"a year's leaf under the rotated CA", issue(later, laterKey, v.Leaf, now), later, now.Add(time.Hour), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Due(tc.leaf, tc.at); got != tc.due {
				t.Errorf("Due = %v, want %v", got, tc.due)
			}
			if got := AtCALimit(tc.leaf, tc.ca, v.Leaf, tc.at); got != tc.atLimit {
				t.Errorf("AtCALimit = %v, want %v (leaf ends %s, CA %s)", got, tc.atLimit, tc.leaf.NotAfter, tc.ca.NotAfter)
			}
		})
	}

	// Renewal rounds every minute for a day under the CA expiring soon:
	// the leaf ending before the CA is renewed once, then never again.
	leaf, renewals := short, 0
	for at := now; at.Before(now.Add(24 * time.Hour)); at = at.Add(time.Minute) {
		if v.Due(leaf, at) && !AtCALimit(leaf, soon, v.Leaf, at) {
			leaf = issue(soon, soonKey, v.Leaf, at)
			renewals++
		}
	}
	if renewals != 1 {
		t.Errorf("%d renewals in a day of rounds under a CA expiring in 10 days, want 1", renewals)
	}
	// The CA rotated: renewed by the new one, to a year.
	if !v.Due(leaf, now.Add(24*time.Hour)) || AtCALimit(leaf, later, v.Leaf, now.Add(24*time.Hour)) {
		t.Error("a leaf ending with the old CA is not renewed by the rotated one")
	}
}

// TestCALimitWarning names the CA, its expiry, the leaves and what to do.
func TestCALimitWarning(t *testing.T) {
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	ca, _ := testCA(t, "c1-ca", now.Add(-time.Hour), now.Add(10*24*time.Hour))
	w := CALimitWarning(ca, []string{"server", "peer"})
	for _, want := range []string{`"c1-ca"`, "2027-03-11T12:00:00Z", "[server peer]", "rotate the CA"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}
}
