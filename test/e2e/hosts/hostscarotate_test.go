package hosts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsCARotation: `steward certs rotate-ca` on three members on three
// joined hosts, under a writer that re-reads the coordinator's ca.crt and
// its issued certificate at each connection, killed with SIGKILL before
// and after every step's action in turn and resumed each time
// (harness.KillAtEveryStepThen); after the kill that follows the hosts' leaves
// reissued, the hosts trust both CAs, and a resume with a follower's host
// cut off fails the step naming the host and leaves the plan resumable;
// the next resume, once the host is back, goes on: no write fails and
// every acknowledged one is there; every host's ca.crt is the
// coordinator's new CA alone; every member's client and peer port and
// every host's agent serves a certificate the new CA signed in a live
// handshake, without the cross-signed CA (the old CA alone verifies none
// of them, by Go and by `openssl verify`; every host leaf file is the
// leaf alone); a client trusting only the old CA refuses every member; a
// client certificate of the old CA is refused by every member
// while its reissued twin (same key) is accepted; Steward still reaches
// every agent.
func TestHostsCARotation(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	hs.Init("3.6.16")
	hs.StartAgents()
	hs.MustRun("up")
	hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	s := hs.Spec()
	dir := s.CertDir(hs.Dir)
	cli, oldCA, old := harness.RotationClient(t, hs.Env)
	// Attempts and timeout as TestHostsCertRenewal's: a write held up by
	// the host cut off below is retried until the host is back.
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "/hostscarotate", Interval: 20 * time.Millisecond, Attempts: 20, Timeout: 3 * time.Second}, harness.Expect{Acked: 20, Within: 20 * time.Second, NoFailed: true})

	// Killed before and after every step's action and resumed each time.
	// After the reissue step's kill (the hosts' leaves reissued, the step
	// not recorded done) the hosts trust both CAs, and a resume with a
	// follower's host cut off fails the step naming the host (the other
	// hosts' leaves found done) and leaves the plan to resume; the next
	// resume, once the host is back, runs the step a fourth time.
	cut := false
	cutHost := func(p *plan.Plan, k int) int {
		if p.Steps[k].Kind != carotate.StepReissue {
			return 0
		}
		cut = true
		for _, h := range hs.Hosts {
			b, err := os.ReadFile(filepath.Join(h.Dir, "pki", pki.CACert))
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(b, []byte("BEGIN CERTIFICATE")); n != 2 || !bytes.HasPrefix(b, oldCA) {
				t.Errorf("host %s ca.crt mid-rotation holds %d certificates, want the old CA and the new", h.Name, n)
			}
		}
		var victim *harness.AgentHost
		for _, m := range hs.Status().Members {
			if m.Role == "follower" {
				victim = hs.Host(m.Agent)
				break
			}
		}
		victim.Cut(t)
		_, se, err := hs.Run("plan", "resume")
		victim.Heal(t)
		if err == nil || !strings.Contains(se, "host "+victim.Name+": read its server certificate") || !strings.Contains(se, "unreachable") {
			t.Fatalf("plan resume with host %s cut off: %v, stderr %s; want exit 1 naming the host", victim.Name, err, se)
		}
		if p := harness.LatestPlan(t, hs.Env); p.State != plan.Failed || p.Steps[k].State != plan.Failed || p.Steps[k].Attempts != 3 {
			t.Fatalf("after the resume with a host cut off: %s", harness.StepStates(p))
		}
		hs.WaitStatus(time.Minute, "healthy once the host is back", harness.Healthy)
		return 1
	}
	harness.KillAtEveryStepThen(t, hs.Env, cutHost, "certs", "rotate-ca")
	if !cut {
		t.Fatalf("the plan has no %s step: no resume ran with a host cut off", carotate.StepReissue)
	}
	if p := harness.LatestPlan(t, hs.Env); p.Kind != plan.KindCARotation || p.State != plan.Done {
		t.Fatalf("latest plan: %s", harness.StepStates(p))
	}
	st := hs.WaitStatus(time.Minute, "a healthy cluster after the rotation", harness.Healthy)
	harness.Eventually(t, 20*time.Second, 50*time.Millisecond, "writes acknowledged after the rotation", w.AckedAbove(w.Acked()+20))
	w.Finish(t)

	ca, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ca, oldCA) || bytes.Count(ca, []byte("BEGIN CERTIFICATE")) != 1 {
		t.Fatalf("ca.crt after the rotation is not one new CA:\n%s", ca)
	}
	newCA, err := pki.ParseCertPEM(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs.Hosts {
		if b, _ := os.ReadFile(filepath.Join(h.Dir, "pki", pki.CACert)); !bytes.Equal(b, ca) {
			t.Errorf("host %s ca.crt is not the new CA alone:\n%s", h.Name, b)
		}
		if prev, _ := filepath.Glob(filepath.Join(h.Dir, "pki", "*"+pki.PrevSuffix)); len(prev) > 0 {
			t.Errorf("host %s: previous certificates left: %v", h.Name, prev)
		}
	}
	// Every member's ports and every remote agent serve a certificate
	// the new CA signed directly.
	// ... without the cross-signed CA after it (the rotation's last step
	// retired it): the new CA alone verifies each served chain, the old CA
	// alone does not (Go and `openssl verify`), and no certificate the old
	// CA issued is in it.
	oldCert, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		sm, _ := s.Member(m.Name)
		for _, u := range []string{sm.ClientURL, sm.PeerURL} {
			harness.RequireServedBy(t, "member "+m.Name+" after the rotation", u, newCA)
			harness.RequireOldCARetired(t, "member "+m.Name+" after the rotation", u, oldCert, newCA)
		}
	}
	for _, a := range s.Agents {
		if a.Remote() {
			addr := strings.TrimPrefix(a.Endpoint(), "https://")
			harness.RequireServedBy(t, "agent "+a.Name+" after the rotation", addr, newCA)
			harness.RequireOldCARetired(t, "agent "+a.Name+" after the rotation", addr, oldCert, newCA)
		}
	}
	for _, h := range hs.Hosts {
		for _, n := range pki.HostLeafNames {
			if b, _ := os.ReadFile(filepath.Join(h.Dir, "pki", n+".crt")); bytes.Count(b, []byte("BEGIN CERTIFICATE")) != 1 {
				t.Errorf("host %s %s.crt after the rotation holds %d certificates, want the leaf alone", h.Name, n, bytes.Count(b, []byte("BEGIN CERTIFICATE")))
			}
		}
	}
	// The old CA's client certificate is refused, the reissued one (same
	// key) accepted with the new CA as the client's root; a client
	// trusting only the old CA refuses every member (the cross-signed CA
	// is no longer served).
	harness.RequireRotatedClients(t, s.Members, old, dir, "/hostscarotate")
	// Steward reaches every host's agent with its new admin certificate.
	hs.MustRun("certs", "list")
}

// TestHostsCARotationRollback: three members on three joined hosts under
// the writer that follows the coordinator's ca.crt; `steward certs
// rotate-ca` killed once its reissue step acted (every host's leaves the
// new CA's, every host trusting both CAs), `steward plan abort`, `steward
// rollback`: no write fails and every acknowledged one is there; no member
// restarted (the pids the agents report are unchanged); every host's
// ca.crt is the coordinator's old CA alone, with no previous certificate
// left; every member's client and peer port and every host's agent serves
// a certificate the old CA signed itself, in a live handshake; the hosts'
// renewals work again (`steward certs renew --all`) and Steward reaches
// every agent.
func TestHostsCARotationRollback(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	hs.Init("3.6.16")
	hs.StartAgents()
	hs.MustRun("up")
	st := hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	s := hs.Spec()
	dir := s.CertDir(hs.Dir)
	pids := map[string]int{}
	for _, m := range st.Members {
		pids[m.Name] = m.PID
	}
	cli, oldCA, _ := harness.RotationClient(t, hs.Env)
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "/hostscarollback", Interval: 20 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{Acked: 20, Within: 20 * time.Second, NoFailed: true})
	oldCert, err := pki.ParseCertPEM(oldCA)
	if err != nil {
		t.Fatal(err)
	}

	point := crashpoint.Indexed(crashpoint.PlanStepAfter, 2)
	so, se, err := hs.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "certs", "rotate-ca")
	if err == nil || !strings.Contains(se, "crashpoint: "+point+"\n") {
		t.Fatalf("rotate-ca with %s: %v, want it killed there\nstdout: %s\nstderr: %s", point, err, so, se)
	}
	if p := harness.LatestPlan(t, hs.Env); p.Steps[2].Kind != carotate.StepReissue {
		t.Fatalf("after the kill: %s", harness.StepStates(p))
	}
	for _, h := range hs.Hosts {
		b, _ := os.ReadFile(filepath.Join(h.Dir, "pki", "server.crt"))
		if l, _, err := pki.ParseLeafChainPEM(b); err != nil || l.CheckSignatureFrom(oldCert) == nil {
			t.Fatalf("host %s server certificate after the reissue step: still the old CA's (%v)", h.Name, err)
		}
	}
	hs.MustRun("plan", "abort")
	hs.MustRun("rollback")
	if p := harness.LatestPlan(t, hs.Env); p.Kind != plan.KindCARotationRollback || p.State != plan.Done {
		t.Fatalf("after the rollback: %s", harness.StepStates(p))
	}

	st = hs.WaitStatus(time.Minute, "a healthy cluster after the rollback", harness.Healthy)
	harness.Eventually(t, 20*time.Second, 50*time.Millisecond, "writes acknowledged after the rollback", w.AckedAbove(w.Acked()+20))
	w.Finish(t)
	for _, m := range st.Members {
		if m.PID != pids[m.Name] {
			t.Errorf("%s restarted (pid %d, was %d)", m.Name, m.PID, pids[m.Name])
		}
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(ca, oldCA) {
		t.Fatalf("the coordinator's ca.crt is not the old CA alone:\n%s", ca)
	}
	for _, h := range hs.Hosts {
		if b, _ := os.ReadFile(filepath.Join(h.Dir, "pki", pki.CACert)); !bytes.Equal(b, oldCA) {
			t.Errorf("host %s ca.crt is not the old CA alone:\n%s", h.Name, b)
		}
		if prev, _ := filepath.Glob(filepath.Join(h.Dir, "pki", "*"+pki.PrevSuffix)); len(prev) > 0 {
			t.Errorf("host %s: previous certificates left: %v", h.Name, prev)
		}
	}
	for _, m := range s.Members {
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			harness.RequireServedBy(t, "member "+m.Name+" after the rollback", u, oldCert)
		}
	}
	for _, a := range s.Agents {
		if a.Remote() {
			harness.RequireServedBy(t, "agent "+a.Name+" after the rollback", strings.TrimPrefix(a.Endpoint(), "https://"), oldCert)
		}
	}
	hs.MustRun("certs", "renew", "--all")
	hs.MustRun("certs", "list")
}
