package certs

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestRoundUnderCAExpiringSoon: under a CA that expires in 10 days with a
// year's leaf lifetime (the spec's default), the renewal rounds renew the
// leaves once (cut a minute before the CA) and then leave them alone,
// each round reporting that the CA must be rotated (ErrCALimit, naming the
// CA and the leaves) instead of reissuing every leaf again (before:
// every round reissued every leaf, a reload of every member each time).
func TestRoundUnderCAExpiringSoon(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	certDir := s.CertDir(dir)
	// A CA of 10 days (as a user's CA or one near its end would be),
	// leaves of 9 days: due under the spec's year-long lifetime.
	if err := pki.EnsureWith(certDir, s.Name, nil, pki.Validity{CA: 10 * 24 * time.Hour, Leaf: 9 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	leaves, err := pki.FindLeaves(certDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	serials := map[string]string{}
	for _, l := range leaves {
		serials[l.Name] = serialOf(t, l.Cert)
	}
	log := slog.New(slog.DiscardHandler)
	reissues := 0
	for i := range 5 {
		_, rs, err := round(t.Context(), dir, log)
		reissues += len(rs)
		// Round 1 renews them (they end days before the CA) to the CA's
		// end; from then on every round says so.
		switch {
		case i == 0 && len(rs) != len(serials):
			t.Errorf("round 1 renewed %v, want every leaf (they end days before the CA)", rs)
		case !errors.Is(err, ErrCALimit):
			t.Fatalf("round %d: error %v, want one saying the CA must be rotated", i+1, err)
		case !strings.Contains(err.Error(), ca.Subject.CommonName) || !strings.Contains(err.Error(), "server") || !strings.Contains(err.Error(), "rotate the CA"):
			t.Errorf("round %d: %v does not name the CA, the leaves and what to do", i+1, err)
		}
	}
	if reissues != len(serials) {
		t.Errorf("%d reissues in 5 rounds under a CA expiring in 10 days, want %d (each leaf once)", reissues, len(serials))
	}
	for _, l := range leaves {
		c, err := pki.ParseCertFile(l.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if !c.NotAfter.Equal(ca.NotAfter.Add(-pki.CACut)) {
			t.Errorf("%s ends %s, want a minute before the CA (%s)", l.Name, c.NotAfter, ca.NotAfter)
		}
		if serialOf(t, l.Cert) == serials[l.Name] {
			t.Errorf("%s was not renewed in the first round", l.Name)
		}
	}
}
