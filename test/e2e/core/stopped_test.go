package core_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestStoppedCluster: after `steward down`, status says so in one line
// from the spec and the agents' absence, without probing a member (no
// member carries a probe's error), and exits 1 (as etcdctl endpoint health does with no
// healthy endpoint); the commands that talk to the members refuse in one
// line naming `steward up`; the commands that would start the members
// through the agent (member add) refuse instead of starting the whole
// cluster. Before, status took 6 s, exited 0 and repeated a raw
// `dial unix .../agent.sock` error nine times, and member add silently
// started every member.
func TestStoppedCluster(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, binaries.EmbeddedVersion())
	e.MustRun("down")

	so, se, err := e.Run("status")
	if code := exitCodeOf(err); code != 1 {
		t.Errorf("status of a stopped cluster: exit code %d, want 1\nstdout: %s\nstderr: %s", code, so, se)
	}
	if out := strings.TrimSpace(so); strings.Count(out, "\n") != 0 || !strings.Contains(out, "is stopped") || !strings.Contains(out, "steward up") {
		t.Errorf("status of a stopped cluster, want one line naming `steward up`:\n%s", so)
	}
	if strings.Contains(so+se, "agent.sock") {
		t.Errorf("status of a stopped cluster quotes the agent's socket:\n%s%s", so, se)
	}
	so, _, err = e.Run("status", "-o", "json")
	var st status.Status
	if exitCodeOf(err) != 1 || json.Unmarshal([]byte(so), &st) != nil || !st.Cluster.Stopped || len(st.Members) != 3 {
		t.Errorf("status -o json of a stopped cluster: %v\n%s", err, so)
	}
	if c := harness.Cond(&st, status.CondReady); c.Status != "False" || c.Reason != status.ReasonClusterStopped {
		t.Errorf("Ready of a stopped cluster: %+v", c)
	}
	// What took 6 s was probing members that are not there: a stopped
	// cluster's status is the spec's, with no probe's error on a member
	// (timing it here would only measure the machine's load).
	for _, m := range st.Members {
		if m.LastError != "" || m.Healthy || m.Process != status.ProcessStopped {
			t.Errorf("member %s of a stopped cluster was probed or is not reported stopped: %+v", m.Name, m)
		}
	}

	for _, args := range [][]string{
		{"backup", "now"},
		{"defrag"},
		{"leader", "move", "--to", "etcd-2"},
		{"alarm", "list"},
		{"member", "add", "etcd-4"},
		{"member", "start", "etcd-1"},
		{"upgrade", "apply", "--to", "3.7.3"},
	} {
		out := strings.TrimSpace(e.MustFail(args...))
		if strings.Count(out, "\n") != 0 || !strings.Contains(out, "is stopped") || !strings.Contains(out, "`steward up --dir "+e.Dir+"`") || strings.Contains(out, "--member") {
			t.Errorf("steward %s on a stopped cluster, want one line naming `steward up`:\n%s", strings.Join(args, " "), out)
		}
	}
	// Nothing was started by the refused commands.
	if left := harness.ProcessesUsing(e.Dir); len(left) > 0 {
		t.Errorf("processes started by refused commands on a stopped cluster: %v", left)
	}
	if got := len(e.Spec().Members); got != 3 {
		t.Errorf("spec has %d members after a refused member add, want 3", got)
	}

	// Up again: status reports it as before, exit 0.
	e.MustRun("up")
	e.WaitStatus(time.Minute, "healthy", harness.Healthy)
}

// TestLeaderMoveArgument: a member named as an argument points to --to.
func TestLeaderMoveArgument(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	out := e.MustFail("leader", "move", "etcd-9")
	if strings.Contains(out, "unknown command") || !strings.Contains(out, "--to etcd-9") {
		t.Errorf("leader move etcd-9: %s", out)
	}
}

func exitCodeOf(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
