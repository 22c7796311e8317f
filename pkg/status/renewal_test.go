package status

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster/clustertest"
)

// TestRenewalCondition: CertificateRenewal from the recorded state, for
// each way the loop can be (never reported, stopped, gone, silent,
// running), where an agent runs it and where it is a process of its own.
func TestRenewalCondition(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	running := RenewalState{PID: 42, StartedAt: now.Add(-time.Hour), Heartbeat: now.Add(-2 * time.Second),
		LastRenewal: now.Add(-10 * time.Minute), NextRenewal: now.Add(time.Hour)}
	with := func(f func(*RenewalState)) RenewalState { s := running; f(&s); return s }
	for _, tc := range []struct {
		name      string
		process   string
		st        RenewalState
		err       error
		alive     bool
		status    string
		reason    string
		inMessage string
	}{
		{"never reported, process", "certs renew --watch", RenewalState{}, nil, false, "False", "NotRunning", "the hosts' certificates are not renewed"},
		{"never reported, agent", "agent", RenewalState{}, nil, false, "Unknown", "NotReported", "has not reported"},
		{"unreadable", "agent", RenewalState{}, errors.New("bad json"), false, "Unknown", "StateUnreadable", "bad json"},
		{"stopped", "certs renew --watch", with(func(s *RenewalState) { s.StoppedAt = now.Add(-time.Minute) }), nil, false, "False", "Stopped", "stopped 1m0s ago"},
		{"gone", "certs renew --watch", running, nil, false, "False", "NotRunning", "(pid 42) is gone, last heartbeat 2s ago"},
		{"gone, agent", "agent", running, nil, false, "False", "NotRunning", "start the agent"},
		{"silent", "certs renew --watch", with(func(s *RenewalState) { s.Heartbeat = now.Add(-time.Minute) }), nil, true, "False", "NotResponding", "last reported 1m0s ago"},
		{"running", "certs renew --watch", running, nil, true, "True", "Running", "pid 42, heartbeat 2s ago, last renewal 10m0s ago, next renewal point 2026-11-24T13:00:00Z"},
		{"running, round failed", "certs renew --watch", with(func(s *RenewalState) { s.LastError = "host h2: unreachable" }), nil, true, "True", "Running", "last round failed: host h2: unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := renewalCondition(&RenewalStatus{Process: tc.process, RenewalState: tc.st}, tc.err, tc.alive, now)
			if c.Type != CondCertificateRenewal || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.inMessage) {
				t.Errorf("%+v, want %s/%s with %q", c, tc.status, tc.reason, tc.inMessage)
			}
			// A renewal that does not run names what starts it (the
			// command says how); the others need nothing started.
			var fix Fix
			if tc.reason == "NotRunning" || tc.reason == "Stopped" {
				fix = FixRenewerStart
				if tc.process == "agent" {
					fix = FixAgentStart
				}
			}
			if c.Fix != fix {
				t.Errorf("fix %q, want %q", c.Fix, fix)
			}
		})
	}
}

// TestRenewalRunning: Renewal reads the state file and calls the loop
// running only when its process is alive, it did not stop, and its
// heartbeat is fresh; a coordinator without a local agent names its
// process and log.
func TestRenewalRunning(t *testing.T) {
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name string
		st   RenewalState
		want bool
	}{
		{"alive and fresh", RenewalState{PID: os.Getpid(), Heartbeat: now}, true},
		{"stale", RenewalState{PID: os.Getpid(), Heartbeat: now.Add(-RenewalStale - time.Second)}, false},
		{"stopped", RenewalState{PID: os.Getpid(), Heartbeat: now, StoppedAt: now}, false},
		{"exited", RenewalState{PID: exited.Process.Pid, Heartbeat: now}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.MultiHost(t, false, true)
			if err := WriteRenewalState(c.Dir, tc.st); err != nil {
				t.Fatal(err)
			}
			rs, err := Renewal(c, now)
			if err != nil || rs.Running != tc.want || rs.PID != tc.st.PID {
				t.Errorf("Renewal: %+v, %v; want running %v", rs, err, tc.want)
			}
			if rs.Process != "certs renew --watch" || !strings.HasSuffix(rs.Log, "/logs/certrenew.log") {
				t.Errorf("process %q, log %q", rs.Process, rs.Log)
			}
		})
	}
	// Nothing recorded yet: not running, no error.
	c := clustertest.MultiHost(t, false, true)
	if rs, err := Renewal(c, now); err != nil || rs.Running || rs.PID != 0 {
		t.Errorf("no state file: %+v, %v", rs, err)
	}
}
