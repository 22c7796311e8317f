package certs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestCARotationUnderWrites: `steward certs rotate-ca` on three members on
// one host, killed with SIGKILL before and after every step's action in
// turn and resumed each time (STEWARD_CRASHPOINT, as the upgrade kill
// tests), while a client that re-reads its files (pki/ca.crt, the issued
// client certificate in pki/clients) writes throughout: no write fails, and
// every acknowledged one is there. At the end ca.crt is the new CA alone
// (the old kept as ca-old.crt), every member serves a certificate of the
// new CA without the cross-signed CA after it (the old CA alone verifies
// no member's client or peer port, the new CA alone does; every leaf file
// is the leaf alone), a client presenting a certificate of the old CA is
// refused by every member, while the same client with the reissued
// certificate works, and a client trusting only the old CA refuses every
// member.
func TestCARotationUnderWrites(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	v := vs[len(vs)-1]
	e := harness.New(t)
	e.Up(3, v)
	s := e.Spec()
	dir := s.CertDir(e.Dir)
	cli, oldCA, old := harness.RotationClient(t, e)
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "/carotate", Interval: 20 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{NoFailed: true})

	harness.KillAtEveryStep(t, e, "certs", "rotate-ca")

	p := harness.LatestPlan(t, e)
	if p.Kind != plan.KindCARotation || p.State != plan.Done {
		t.Fatalf("latest plan: %s", harness.StepStates(p))
	}
	e.WaitStatus(time.Minute, "a healthy cluster after the rotation", harness.Healthy)
	w.Finish(t)

	ca, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ca, oldCA) || bytes.Count(ca, []byte("BEGIN CERTIFICATE")) != 1 {
		t.Fatalf("ca.crt after the rotation is not one new CA:\n%s", ca)
	}
	if kept, _ := os.ReadFile(filepath.Join(dir, pki.CAOldCert)); !bytes.Equal(kept, oldCA) {
		t.Error("the old CA is not kept as ca-old.crt")
	}
	newCA := harness.ReadCert(t, filepath.Join(dir, pki.CACert))
	oldCert, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}
	// The rotation's last step retired the cross-signed CA: every
	// member's client and peer port serves its leaf alone, which the new
	// CA alone verifies and the old CA alone does not (Go and `openssl
	// verify` of the served chain). The local agent serves its API on a
	// Unix socket, without TLS: there is no chain of it to check here
	// (TestHostsCARotation checks the joined hosts' agents).
	for _, m := range s.Members {
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			harness.RequireServedBy(t, m.Name+" after the rotation", u, newCA)
			harness.RequireOldCARetired(t, m.Name+" after the rotation", u, oldCert, newCA)
		}
	}
	for _, n := range []string{pki.ServerCert, pki.PeerCert, pki.ClientCert, filepath.Join(pki.ClientsDir, "writer.crt")} {
		if b, _ := os.ReadFile(filepath.Join(dir, n)); bytes.Count(b, []byte("BEGIN CERTIFICATE")) != 1 {
			t.Errorf("%s after the rotation holds %d certificates, want the leaf alone", n, bytes.Count(b, []byte("BEGIN CERTIFICATE")))
		}
	}
	// The old CA's client certificate is refused, the reissued one (same
	// key) accepted with the new CA as the client's root; a client
	// trusting only the old CA refuses every member (the cross-signed CA
	// is no longer served).
	harness.RequireRotatedClients(t, s.Members, old, dir, "/carotate")
	// Steward itself (admin certificate, agent API) works on the new CA.
	e.MustRun("status")
}

// TestEtcdReadsTrustedCAAtStart is the experiment CA rotation is built on,
// for each etcd version: a member keeps the client CA pool it loaded at
// start. With a second CA added to its --trusted-ca-file, a client
// certificate of that CA is still refused; once the member restarted it is
// accepted. (The serving certificate, by contrast, is read at each
// handshake: TestCertificates.)
func TestEtcdReadsTrustedCAAtStart(t *testing.T) {
	t.Parallel()
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			e := harness.New(t)
			e.Up(1, v)
			s := e.Spec()
			m := s.Members[0]
			f := pki.FilesIn(s.CertDir(e.Dir))
			other := t.TempDir()
			if err := pki.Ensure(other, "other", nil); err != nil {
				t.Fatal(err)
			}
			o := pki.FilesIn(other)
			cur, err := os.ReadFile(f.CA)
			if err != nil {
				t.Fatal(err)
			}
			oca, err := os.ReadFile(o.CA)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f.CA, append(cur, oca...), 0o644); err != nil {
				t.Fatal(err)
			}
			// The other CA's client, trusting the cluster CA for the server.
			get := func() error {
				tc, err := pki.ClientTLSFiles(f.CA, o.ClientCert, o.ClientKey)
				if err != nil {
					t.Fatal(err)
				}
				c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
				if err != nil {
					return err
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				_, err = c.Get(ctx, "k")
				return err
			}
			if err := get(); err == nil {
				t.Fatalf("etcd %s accepted a client of a CA added to its trusted CA file without a restart", v)
			}
			e.MustRun("member", "stop", "--force", m.Name)
			e.MustRun("member", "start", m.Name)
			e.WaitStatus(time.Minute, "the member healthy after its restart", harness.Healthy)
			if err := get(); err != nil {
				t.Fatalf("etcd %s refused a client of a CA in its trusted CA file after a restart: %v", v, err)
			}
		})
	}
}
