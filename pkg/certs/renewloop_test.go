package certs

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

func serialOf(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", p)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// TestRound: a round renews the leaves past their renewal point (the
// spec's lifetimes, seconds here), not the issued clients, keeps no
// previous certificate once no running member serves the old one (none
// runs here), and returns a wait of a tenth of the margin. A spec whose
// directory has no CA key reports that the host cannot sign.
func TestRound(t *testing.T) {
	dir, s, v := shortLivedDir(t)
	certDir := s.CertDir(dir)
	if _, err := pki.IssueClient(certDir, s.Name, "kube-apiserver", time.Hour, "", v); err != nil {
		t.Fatal(err)
	}
	f := pki.FilesIn(certDir)
	server, client := serialOf(t, f.ServerCert), serialOf(t, filepath.Join(certDir, pki.ClientsDir, "kube-apiserver.crt"))
	log := slog.New(slog.DiscardHandler)

	// Due one second after issuance (30s lifetime, 29s margin, 3s backdated).
	deadline := time.Now().Add(10 * time.Second)
	for serialOf(t, f.ServerCert) == server {
		if time.Now().After(deadline) {
			t.Fatal("the server certificate was not renewed within 10s of its renewal point")
		}
		wait, _, err := round(t.Context(), dir, log)
		if err != nil {
			t.Fatal(err)
		}
		if wait != 2900*time.Millisecond {
			t.Errorf("wait %s, want a tenth of the 29s margin", wait)
		}
		if serialOf(t, f.ServerCert) == server {
			time.Sleep(200 * time.Millisecond) // until the renewal point: nothing to poll
		}
	}
	if serialOf(t, filepath.Join(certDir, pki.ClientsDir, "kube-apiserver.crt")) != client {
		t.Error("the loop renewed an issued client certificate")
	}
	if _, err := os.Stat(f.ServerCert + pki.PrevSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("previous certificate left: %v", err)
	}
	if _, err := pki.ClientTLS(certDir); err != nil {
		t.Errorf("renewed admin pair: %v", err)
	}

	// Without the CA key (a joined host): nothing renewed, one clear error.
	if err := os.Remove(filepath.Join(certDir, pki.CAKey)); err != nil {
		t.Fatal(err)
	}
	renewed := serialOf(t, f.ServerCert)
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, _, err := round(t.Context(), dir, log)
		if err != nil {
			if want := "holds no CA key"; !contains(err.Error(), want) {
				t.Fatalf("without the CA key: %v, want %q", err, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no error without the CA key once due")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if serialOf(t, f.ServerCert) != renewed {
		t.Error("renewed without the CA key")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestRoundSaysWhenARotationStalls: while a CA rotation's plan runs, the
// loop waits quietly; once that plan is no longer active (aborted) but the
// next CA is still there, renewals cannot happen and the round says so,
// naming the plan and what to run.
func TestRoundSaysWhenARotationStalls(t *testing.T) {
	dir, s, v := shortLivedDir(t)
	certDir := s.CertDir(dir)
	if err := RotationPrepare(certDir, s.Name, v); err != nil {
		t.Fatal(err)
	}
	store := plan.OpenStore(dir)
	p := &plan.Plan{ID: "ca-rotation-1", Kind: plan.KindCARotation, State: plan.Running, CreatedAt: time.Now(),
		Steps: []plan.Step{{Index: 0, Kind: "ca-prepare", State: plan.Done}, {Index: 1, Kind: "ca-trust", State: plan.Pending}}}
	if err := store.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, _, err := round(t.Context(), dir, log); err != nil {
		t.Fatalf("round under a running rotation: %v, want a quiet wait", err)
	}
	p.State = plan.Aborted
	if err := store.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	_, _, err := round(t.Context(), dir, log)
	// The plan named; what to run is the command's to say
	// (ErrRotationNotRunning: cli.LibraryAdvice).
	if err == nil || !strings.Contains(err.Error(), "ca-rotation-1") || !errors.Is(err, ErrRotationNotRunning) {
		t.Fatalf("round under an aborted rotation: %v, want the plan named, of kind ErrRotationNotRunning", err)
	}
}

// shortLivedDir is a one-member Steward directory whose spec gives leaves
// 30 s with a 29 s renewal margin, and its certificates.
func shortLivedDir(t *testing.T) (string, *spec.Cluster, pki.Validity) {
	t.Helper()
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 1, Version: binaries.EmbeddedVersion(), StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.TLS.LeafValidity, s.TLS.RenewBefore = "30s", "29s"
	if err := s.Save(filepath.Join(dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	v := pki.Validity{Leaf: 30 * time.Second, RenewBefore: 29 * time.Second}
	if err := pki.EnsureWith(s.CertDir(dir), s.Name, nil, v); err != nil {
		t.Fatal(err)
	}
	return dir, s, v
}
