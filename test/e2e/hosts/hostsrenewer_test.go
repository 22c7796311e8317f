package hosts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestHostsRenewerRestart: the certificate renewal process `steward up`
// starts on a coordinator that runs no agent is reported and brought back.
// One host (its agent in a network namespace) with 40 s leaves: status
// shows the renewal running (certificateRenewal with the pid of
// DIR/run/certrenew.pid, CertificateRenewal=True); after `kill -9` of it,
// status reports it gone (CertificateRenewal=False/NotRunning, polled);
// `steward up` says so and starts it again; the new process renews the
// host's certificates (recorded in certificateRenewal and seen as a new
// serial in the member's live handshake); a second renewal process of the
// directory is refused at once; `down` stops it and status's state file
// records the stop.
func TestHostsRenewerRestart(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 1)
	hs.Init("3.6.16")
	s := hs.Spec()
	s.TLS.LeafValidity = "40s"
	if err := s.Save(filepath.Join(hs.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	hs.StartAgents()
	if so, se, err := hs.Run("up"); err != nil || !strings.Contains(se, "started certificate renewal of the hosts") {
		t.Fatalf("up: %v; want the renewal of the hosts' certificates started\nstdout: %s\nstderr: %s", err, so, se)
	}
	st := hs.WaitStatus(time.Minute, "one healthy member on h1", harness.Healthy)
	member := st.Members[0].Name
	// init issued year-long leaves: put them on the short lifetime.
	hs.MustRun("certs", "renew", "--all")

	renewal := func(st *status.Status) (*status.RenewalStatus, status.Condition) {
		t.Helper()
		if st.CertificateRenewal == nil {
			t.Fatalf("status has no certificateRenewal")
		}
		return st.CertificateRenewal, harness.Cond(st, status.CondCertificateRenewal)
	}
	pidFile := filepath.Join(hs.Dir, "run", certs.RenewerPIDFile)
	first := readPID(t, pidFile)
	harness.Eventually(t, 30*time.Second, 500*time.Millisecond, "status reporting the renewal running", func() error {
		rs, c := renewal(hs.Status())
		if c.Status != "True" || !rs.Running || rs.PID != first || rs.Process != "certs renew --watch" {
			return fmt.Errorf("pid %d (pid file %d), running %v, process %q: %+v", rs.PID, first, rs.Running, rs.Process, c)
		}
		return nil
	})
	// The JSON field names are the documented ones.
	var raw struct {
		CertificateRenewal map[string]any `json:"certificateRenewal"`
	}
	if err := json.Unmarshal([]byte(hs.MustRun("status", "-o", "json")), &raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"running", "process", "log", "pid", "startedAt", "heartbeat", "lastRound", "nextRenewal"} {
		if _, ok := raw.CertificateRenewal[f]; !ok {
			t.Errorf("status -o json: certificateRenewal has no %q: %v", f, raw.CertificateRenewal)
		}
	}

	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, 500*time.Millisecond, "status reporting the killed renewal", func() error {
		rs, c := renewal(hs.Status())
		// steward status names what restarts it.
		if c.Status != "False" || c.Reason != "NotRunning" || rs.Running || !strings.Contains(c.Message, fmt.Sprintf("(pid %d) is gone", first)) ||
			!strings.HasSuffix(c.Message, "; `steward up` restarts it (or its systemd unit, deploy/systemd/steward-certrenew.service, does)") {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	before := harness.CertsList(hs.Env)["member "+member+" client"].Serial

	restarted := time.Now()
	so, se, err := hs.Run("up")
	if err != nil || !strings.Contains(se, fmt.Sprintf("certificate renewal process (pid %d) is gone", first)) || !strings.Contains(se, "started certificate renewal of the hosts") {
		t.Fatalf("up after the kill: %v; want the dead renewal named and a new one started\nstdout: %s\nstderr: %s", err, so, se)
	}
	second := readPID(t, pidFile)
	if second == first || !proc.Alive(second) {
		t.Fatalf("renewal pid %d after up (was %d), alive %v", second, first, proc.Alive(second))
	}
	// 40 s leaves are due 13 s before their end: the new process renews
	// within about 30 s. Status shows the last round only, and leaves
	// issued a moment apart may be renewed in different rounds (seen on
	// a loaded machine: agent and client in one round, server in the
	// next), so the rounds the restarted process is seen to run add up.
	renewed := map[string]bool{}
	harness.Eventually(t, 90*time.Second, time.Second, "a renewal of h1/server by the restarted process", func() error {
		rs, c := renewal(hs.Status())
		if c.Status == "True" && rs.PID == second && rs.LastRenewal.After(restarted) {
			for _, r := range rs.LastRenewed {
				renewed[r] = true
			}
		}
		if !renewed["h1/server"] {
			return fmt.Errorf("pid %d, last renewal %s of %v (seen renewed since the restart: %v): %+v", rs.PID, rs.LastRenewal, rs.LastRenewed, renewed, c)
		}
		return nil
	})
	if after := harness.CertsList(hs.Env)["member "+member+" client"].Serial; after == before || after == "" {
		t.Errorf("member %s serves serial %s, the same as before the restart (%s)", member, after, before)
	}

	// One renewal process per directory: a second is refused at once.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var errOut bytes.Buffer
	dup := exec.CommandContext(ctx, hs.Bin, "certs", "renew", "--watch", "--dir", hs.Dir)
	dup.Stderr = &errOut
	if err := dup.Run(); err == nil || !strings.Contains(errOut.String(), fmt.Sprintf("another certificate renewal process runs for this directory: pid %d", second)) {
		t.Errorf("a second certs renew --watch: %v: %s", err, errOut.String())
	}
	if got := readPID(t, pidFile); got != second {
		t.Errorf("pid file names %d after the refused second one, want %d", got, second)
	}

	if _, se, err := hs.Run("down"); err != nil || !strings.Contains(se, "stopping certificate renewal") {
		t.Errorf("down: %v: %s", err, se)
	}
	b, err := os.ReadFile(status.RenewalStatePath(hs.Dir))
	var rec status.RenewalState
	if err != nil || json.Unmarshal(b, &rec) != nil || rec.PID != second || rec.StoppedAt.IsZero() {
		t.Errorf("renewal state after down: %v: %s", err, b)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}
