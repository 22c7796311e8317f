package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestCrashLoop: a member that exits at every start is reported as
// CrashLoopBackOff with the reason from its log, and `up` fails fast with
// that reason instead of waiting out its timeout.
func TestCrashLoop(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, binaries.EmbeddedVersion(), func(s *spec.Cluster) {
		s.Etcd.ExtraFlags = map[string]string{"no-such-etcd-flag": "1"}
	})
	start := time.Now()
	out := e.MustFail("up", "--timeout", "2m")
	if time.Since(start) > 60*time.Second {
		t.Errorf("up took %s to report a crash-looping member", time.Since(start))
	}
	if !strings.Contains(out, "CrashLoopBackOff") || !strings.Contains(out, "no-such-etcd-flag") {
		t.Errorf("up error does not name the crash loop and its cause:\n%s", out)
	}
	st := e.Status()
	m := st.Members[0]
	if m.Process != agentapi.StateCrashLoop || m.Restarts < 2 || !strings.Contains(m.LastError, "no-such-etcd-flag") {
		t.Errorf("member status: process %s restarts %d lastError %q", m.Process, m.Restarts, m.LastError)
	}
	if c := harness.Cond(st, status.CondReady); c.Status != "False" {
		t.Errorf("Ready %+v with the only member crash-looping", c)
	}
}

// TestSwapVersion: the agent swaps one member of a 3.5 cluster to 3.6 and
// records the version run on its data dir; it refuses a swap that skips a
// minor version or goes back a minor, and leaves that member running.
func TestSwapVersion(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	if len(vs) < 3 {
		t.Fatalf("need three minor versions, have %v", vs)
	}
	v35, v36, v37 := vs[0], vs[1], vs[2]
	e := harness.New(t)
	e.Up(3, v35)
	names := e.Spec().MemberNames()
	a, err := agentapi.NewClient(e.Spec().Agents[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	oldPID := e.MemberPID(names[0])
	if _, err := a.SwapVersion(ctx, names[0], agentapi.VersionRequest{Version: v36}); err != nil {
		t.Fatal(err)
	}
	st := e.WaitStatus(60*time.Second, names[0]+" on "+v36, func(st *status.Status) bool {
		m, _ := st.Member(names[0])
		return harness.Healthy(st) && m.Version == v36 && m.DataDirVersion == v36
	})
	if m, _ := st.Member(names[0]); m.PID == oldPID {
		t.Error("member was not restarted for the swap")
	}
	if st.Cluster.Version != harness.Minor(v35)+".0" {
		t.Errorf("cluster version %s moved with one member upgraded", st.Cluster.Version)
	}

	_, err = a.SwapVersion(ctx, names[1], agentapi.VersionRequest{Version: v37})
	if err == nil || !strings.Contains(err.Error(), "skips a minor version") {
		t.Fatalf("swap %s -> %s: %v, want a skipped-minor refusal", v35, v37, err)
	}
	_, err = a.SwapVersion(ctx, names[0], agentapi.VersionRequest{Version: v35})
	if err == nil || !strings.Contains(err.Error(), "older minor version") {
		t.Fatalf("swap %s -> %s: %v, want a downgrade refusal", v36, v35, err)
	}
	_, err = a.SwapVersion(ctx, names[1], agentapi.VersionRequest{Version: "3.9.0"})
	if err == nil || !strings.Contains(err.Error(), "not in the binary store") {
		t.Fatalf("swap to a missing version: %v", err)
	}
	st = e.Status()
	if m, _ := st.Member(names[1]); m.Version != v35 || !m.Healthy {
		t.Errorf("refused swap changed %s: version %s healthy %v", names[1], m.Version, m.Healthy)
	}
	if !harness.Healthy(st) {
		t.Error("cluster unhealthy after refused swaps")
	}
}
