package certs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestCARotationRollback: on three members on one host, under a writer
// that re-reads pki/ca.crt and its issued certificate at each handshake,
// `steward certs rotate-ca` killed (SIGKILL) once its clients step acted
// (every leaf then the new CA's), `steward plan abort`, then `steward
// rollback`, killed after its first step and finished by `steward plan
// resume`. Then: no write failed and every acknowledged one is there; no
// member restarted (each kept its pid: they trusted the old CA all along);
// ca.crt is the old CA alone and every leaf file the old CA's; every
// member's client and peer port serves a certificate the old CA signed
// itself (live handshakes); the client certificate the rolled-back new CA
// issued, presented alone, is refused by every member (they trust the old
// CA alone, as from their start) and the old CA's copy accepted; the
// new CA is moved aside, not deleted; the rotation is marked rolled back;
// `certs renew --all` and `certs issue-client` work again, and a later
// `steward certs rotate-ca` runs to the end. A second rollback is refused
// once the rotation is done.
func TestCARotationRollback(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	v := vs[len(vs)-1]
	e := harness.New(t)
	e.Up(3, v)
	s := e.Spec()
	dir := s.CertDir(e.Dir)
	cli, oldCA, old := harness.RotationClient(t, e)
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "/carollback", Interval: 20 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{NoFailed: true})
	pids := map[string]int{}
	for _, m := range s.Members {
		pids[m.Name] = e.MemberPID(m.Name)
	}
	oldCert, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}

	// killed runs steward with a crash point armed and requires that it
	// died there.
	killed := func(point string, args ...string) {
		t.Helper()
		so, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, args...)
		var ee *exec.ExitError
		ok := errors.As(err, &ee)
		if ok {
			ws, wok := ee.Sys().(syscall.WaitStatus)
			ok = wok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		if !ok || !strings.Contains(se, "crashpoint: "+point+"\n") {
			t.Fatalf("steward %s with %s: %v, want it killed there\nstdout: %s\nstderr: %s", strings.Join(args, " "), point, err, so, se)
		}
	}
	clientsStep := 3
	killed(crashpoint.Indexed(crashpoint.PlanStepAfter, clientsStep), "certs", "rotate-ca")
	rot := harness.LatestPlan(t, e)
	if rot.Kind != plan.KindCARotation || rot.Steps[clientsStep].Kind != carotate.StepClients {
		t.Fatalf("after the kill: %s", harness.StepStates(rot))
	}
	// The interrupted rotation is reported by its own condition, not as an
	// upgrade in progress; plan show names the CA it replaces (its
	// payload), which its rollback goes back to.
	sum := sha256.Sum256(oldCert.Raw)
	oldSum := hex.EncodeToString(sum[:])
	requireRotationCondition := func(when, reason, what string) {
		t.Helper()
		st := e.Status()
		if c := harness.Cond(st, plan.CondCertificateRotationInProgress); c.Reason != reason || !strings.Contains(c.Message, what) {
			t.Errorf("%s: CertificateRotationInProgress %+v, want %s naming %q", when, c, reason, what)
		} else if reason == "Interrupted" && !strings.HasSuffix(c.Message, "no process runs it: `steward plan resume`") {
			// steward status names the command that resumes it.
			t.Errorf("%s: CertificateRotationInProgress %+v, want it to end naming `steward plan resume`", when, c)
		}
		if c := harness.Cond(st, plan.CondUpgradeInProgress); c.Status != "False" || c.Reason != "NoPlan" {
			t.Errorf("%s: UpgradeInProgress %+v, want False/NoPlan", when, c)
		}
	}
	requireRotationCondition("the rotation interrupted", "Interrupted", "ca-rotation plan "+rot.ID)
	if v, err := carotate.PayloadOf(&rot); err != nil || v.OldCA != oldSum {
		t.Errorf("the rotation's payload %+v (%v), want the old CA %s", v, err, oldSum)
	}
	if out := e.MustRun("plan", "show"); !strings.HasPrefix(out, "plan "+rot.ID+": ca-rotation of the CA sha256:"+oldSum[:16]+", running\n") {
		t.Errorf("plan show of the interrupted rotation:\n%s", out)
	}
	// The issued client as the new CA signed it: the leaf alone.
	newWriter := filepath.Join(t.TempDir(), "writer-new.crt")
	b, err := os.ReadFile(filepath.Join(dir, pki.ClientsDir, "writer.crt"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _, err := pki.ParseLeafChainPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.CheckSignatureFrom(oldCert) == nil {
		t.Fatal("after the clients step the issued client certificate is still the old CA's")
	}
	if err := os.WriteFile(newWriter, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := os.ReadFile(filepath.Join(dir, pki.CANextCert))
	if err != nil {
		t.Fatal(err)
	}
	e.MustRun("plan", "abort")

	killed(crashpoint.Indexed(crashpoint.PlanStepAfter, 1), "rollback")
	if p := harness.LatestPlan(t, e); p.Kind != plan.KindCARotationRollback || p.State != plan.Running || p.Of != rot.ID {
		t.Fatalf("after the kill in the rollback: %s (of %q)", harness.StepStates(p), p.Of)
	}
	e.MustRun("plan", "resume")
	rb := harness.LatestPlan(t, e)
	if rb.Kind != plan.KindCARotationRollback || rb.State != plan.Done {
		t.Fatalf("after the resume: %s", harness.StepStates(rb))
	}
	requireRotationCondition("the rollback done", "PlanDone", "ca-rotation-rollback plan "+rb.ID)
	if out := e.MustRun("plan", "show"); !strings.HasPrefix(out, "plan "+rb.ID+": ca-rotation-rollback back to the CA sha256:"+oldSum[:16]+", done\n") {
		t.Errorf("plan show of the rollback:\n%s", out)
	}
	if got, err := plan.OpenStore(e.Dir).Get(rot.ID); err != nil || got.State != plan.RolledBack {
		t.Errorf("the rotation after its rollback: %+v, %v; want it rolled back", got, err)
	}

	e.WaitStatus(time.Minute, "a healthy cluster after the rollback", harness.Healthy)
	for _, m := range s.Members {
		if pid := e.MemberPID(m.Name); pid != pids[m.Name] {
			t.Errorf("%s restarted during the rotation and its rollback (pid %d, was %d)", m.Name, pid, pids[m.Name])
		}
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(ca, oldCA) {
		t.Fatalf("ca.crt after the rollback is not the old CA alone:\n%s", ca)
	}
	names, err := pki.Names(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		l, chain, err := pki.ParseLeafChainPEM(b)
		if err != nil || l.CheckSignatureFrom(oldCert) != nil || len(chain) != 0 {
			t.Errorf("%s after the rollback: issuer %q, %d CA certificates after it (%v); want the old CA's leaf alone", n, l.Issuer.CommonName, len(chain), err)
		}
	}
	for _, m := range s.Members {
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			harness.RequireServedBy(t, m.Name+" after the rollback (not a certificate of the old CA)", u, oldCert)
		}
	}
	if pki.RotationInProgress(dir) {
		t.Error("ca-next.crt still there after the rollback")
	}
	if aside, _ := filepath.Glob(filepath.Join(dir, pki.CANextCert+pki.AbortedSuffix+"*")); len(aside) != 1 {
		t.Errorf("the new CA moved aside: %v, want one file", aside)
	} else if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, next) {
		t.Errorf("%s is not the rolled-back new CA", aside[0])
	}
	get := func(ep, cert, key string) error {
		tc, err := pki.ClientTLSFiles(filepath.Join(dir, pki.CACert), cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = c.Get(ctx, "/carollback", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	}
	for _, m := range s.Members {
		if err := get(m.ClientURL, newWriter, filepath.Join(old, "writer.key")); err == nil {
			t.Errorf("%s accepted a client certificate of the rolled-back new CA", m.Name)
		}
		if err := get(m.ClientURL, filepath.Join(old, "writer.crt"), filepath.Join(old, "writer.key")); err != nil {
			t.Errorf("%s refused the old CA's client certificate after the rollback: %v", m.Name, err)
		}
	}

	e.MustRun("certs", "renew", "--all")
	e.MustRun("certs", "issue-client", "late")
	e.MustRun("certs", "rotate-ca")
	if p := harness.LatestPlan(t, e); p.Kind != plan.KindCARotation || p.State != plan.Done {
		t.Fatalf("the rotation after the rollback: %s", harness.StepStates(p))
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); bytes.Equal(ca, oldCA) || bytes.Equal(ca, next) {
		t.Error("ca.crt after the second rotation is the old or the rolled-back CA")
	}
	e.WaitStatus(time.Minute, "a healthy cluster after the second rotation", harness.Healthy)
	w.Finish(t)
	if se := e.MustFail("certs", "rotate-ca", "--rollback"); !strings.Contains(se, "the CA rotation is done") {
		t.Errorf("rollback of a finished rotation: %q", se)
	}
}
