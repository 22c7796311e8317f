package hosts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsCertAutoRenewal: the joined hosts' certificates are renewed
// with no operator. Three hosts with short leaves (60 s by default,
// STEWARD_TEST_CERT_LIFETIME) run under the acknowledged writer; `steward
// up` on the coordinator, which runs no agent, starts its renewal process
// (`certs renew --watch`). After the watch period (100 s by default,
// STEWARD_TEST_CERT_WATCH) every serving certificate — each member's
// client and peer port and each host's agent, serials read from live
// handshakes by the coordinator — has been replaced at least twice, none
// was ever served expired, no write failed and no member restarted; `down`
// stops the renewal process.
func TestHostsCertAutoRenewal(t *testing.T) {
	t.Parallel()
	lifetime := harness.EnvDuration(t, "STEWARD_TEST_CERT_LIFETIME", 60*time.Second)
	watch := harness.EnvDuration(t, "STEWARD_TEST_CERT_WATCH", 100*time.Second)
	hs := harness.NewHosts(t, 3)
	hs.Init("3.6.16")
	s := hs.Spec()
	s.TLS.LeafValidity = lifetime.String()
	if err := s.Save(filepath.Join(hs.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	hs.StartAgents()
	if so, se, err := hs.Run("up"); err != nil || !strings.Contains(se, "started certificate renewal of the hosts") {
		t.Fatalf("up: %v; want the renewal of the hosts' certificates started\nstdout: %s\nstderr: %s", err, so, se)
	}
	st := hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	pids := map[string]int{}
	for _, m := range st.Members {
		pids[m.Name] = m.PID
	}
	// init issued year-long leaves: put every one on the short lifetime
	// once; from here on nobody renews by hand.
	hs.MustRun("certs", "renew", "--all")

	// The writer's own client certificate outlives the test (a client
	// keeps the certificate it dialled with).
	cli := hs.IssuedClient("writer")
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "/autorenew", Interval: 20 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{NoFailed: true})

	var watched []string // every serving certificate: members' ports, agents
	for _, m := range st.Members {
		watched = append(watched, "member "+m.Name+" client", "member "+m.Name+" peer")
	}
	for _, h := range hs.Hosts {
		watched = append(watched, "agent "+h.Name)
	}
	serials := map[string]map[string]bool{} // name -> serials served
	start := time.Now()
	for time.Since(start) < watch {
		inv := harness.CertsList(hs.Env)
		now := time.Now()
		for _, n := range watched {
			i, ok := inv[n]
			if !ok || i.Serial == "" || i.Error != "" {
				t.Fatalf("%s: %+v", n, i)
			}
			if now.After(i.NotAfter) {
				t.Fatalf("%s serves an expired certificate (serial %s, not after %s)", n, i.Serial, i.NotAfter)
			}
			if serials[n] == nil {
				serials[n] = map[string]bool{}
			}
			serials[n][i.Serial] = true
		}
		time.Sleep(2 * time.Second)
	}
	for _, n := range watched {
		t.Logf("%s served %d certificates in %s", n, len(serials[n]), watch)
	}
	for _, n := range watched {
		if len(serials[n]) < 3 {
			t.Errorf("%s served %d certificates in %s, want the first and at least two renewals", n, len(serials[n]), watch)
		}
	}
	w.Finish(t)
	st = hs.Status()
	for _, m := range st.Members {
		if m.PID != pids[m.Name] {
			t.Errorf("member %s restarted (pid %d, was %d)", m.Name, m.PID, pids[m.Name])
		}
	}
	if c := harness.Cond(st, status.CondCertificatesReady); c.Status != "True" {
		t.Errorf("CertificatesReady after the renewals: %+v", c)
	}
	if b, _ := os.ReadFile(filepath.Join(hs.Dir, "logs", "certrenew.log")); !strings.Contains(string(b), "host=h1") {
		t.Errorf("the renewal process logged no renewal of host h1:\n%s", b)
	}
	// down stops the renewal process (the cleanup fails on anything left).
	if _, se, err := hs.Run("down"); err != nil || !strings.Contains(se, "stopping certificate renewal") {
		t.Errorf("down: %v: %s", err, se)
	}
}
