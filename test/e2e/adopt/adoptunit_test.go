package adopt_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// unitQuote quotes one ExecStart word for systemd (systemd.service(5),
// "Command lines"): double quotes, '\' and '"' escaped, '%' and '$'
// doubled so that neither specifiers nor variables expand.
func unitQuote(s string) string {
	s = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$").Replace(s)
	return `"` + s + `"`
}

// foreignUnit writes a systemd service unit running member m of a foreign
// cluster as a distribution's unit would (Type=notify, Restart=always,
// wanted by multi-user.target) into sd's unit directory, and returns its
// path.
func foreignUnit(t *testing.T, sd *harness.Systemd, m *harness.ForeignMember) string {
	t.Helper()
	var exec, env strings.Builder
	for i, a := range m.Cmdline {
		if i > 0 {
			exec.WriteString(" \\\n  ")
		}
		exec.WriteString(unitQuote(a))
	}
	for _, kv := range m.Env {
		if !strings.HasPrefix(kv, "PATH=") {
			fmt.Fprintf(&env, "Environment=%s\n", unitQuote(kv))
		}
	}
	unit := fmt.Sprintf(`[Unit]
Description=etcd member %s
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
%sExecStart=%s
Restart=always
RestartSec=1
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
`, m.Name, env.String(), exec.String())
	p := filepath.Join(sd.UnitDir, "etcd-"+m.Name+".service")
	if err := os.WriteFile(p, []byte(unit), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// unitCgroup is the cgroup2 path of pid (its "0::" line), "" when none.
func unitCgroup(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// TestAdoptUnit (issue 14): member infra3 of an attached three-member
// etcd 3.5 cluster run by a systemd unit (Type=notify, Restart=always,
// enabled) under a real systemd (harness.StartSystemd). `adopt --unit`
// with a copy of the unit file that systemd does not run is refused and
// changes nothing. Then, under a writer, `adopt --unit` with the unit
// systemd runs: the plan is done, the unit disabled and inactive, its
// process gone, the member runs under the local agent with its member ID;
// after kill -9 the agent restarts it and systemd does not (the unit stays
// inactive). `adopt --undo` enables and starts the unit again: the member
// runs in the unit's control group, is external in the spec, healthy, with
// its member ID; the adopt plan is rolled back; no acknowledged write is
// lost.
func TestAdoptUnit(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, adoptVersion, 3)
	sd := harness.StartSystemd(t)
	fcli := f.MustClient()
	e := attachForAdopt(t, f)
	run := func(args ...string) string {
		t.Helper()
		so, se, err := e.RunEnv([]string{sd.PathEnv()}, args...)
		if err != nil {
			t.Fatalf("steward %s: %v\n%s%s", strings.Join(args, " "), err, so, se)
		}
		return so
	}
	m := f.Members[2]
	unit := foreignUnit(t, sd, m)
	name := filepath.Base(unit)

	// The member moves from the test's process to systemd's unit.
	m.Stop()
	sd.MustSystemctl(t, "daemon-reload")
	sd.MustSystemctl(t, "enable", "--now", name)
	underUnit := func() (int, error) {
		pid, err := adopt.FindProcess(m.DataDir, m.Name)
		if err != nil {
			return 0, err
		}
		if cg := unitCgroup(pid); cg != "/system.slice/"+name {
			return 0, fmt.Errorf("process %d of %s is in control group %q, not the unit's", pid, m.Name, cg)
		}
		return pid, nil
	}
	if _, err := underUnit(); err != nil {
		t.Fatalf("after systemctl enable --now %s: %v", name, err)
	}
	e.WaitStatus(60*time.Second, "every member healthy, "+m.Name+" run by systemd", harness.Healthy)
	before, id := memberID(t, fcli.MemberList, m.Name)
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/adoptunit", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{Acked: 100})

	// A copy of the unit file, which systemd does not run: refused,
	// nothing changed.
	unchanged := specSnapshot(t, e)
	cp := filepath.Join(t.TempDir(), name)
	if b, err := os.ReadFile(unit); err != nil || os.WriteFile(cp, b, 0o600) != nil {
		t.Fatalf("copy the unit: %v", err)
	}
	_, se, err := e.RunEnv([]string{sd.PathEnv()}, "adopt", "--unit", cp)
	if err == nil || !strings.Contains(se, "systemd runs "+name+" from "+unit+", not from "+cp) {
		t.Errorf("adopt --unit with a copy systemd does not run: %v\n%s", err, se)
	}
	unchanged("the refused adopt --unit")
	if st, _ := sd.Systemctl("is-active", name); strings.TrimSpace(st) != "active" {
		t.Errorf("after the refused adopt %s is %q", name, strings.TrimSpace(st))
	}

	// Adopt.
	var p plan.Plan
	if out := run("adopt", "--unit", unit, "-o", "json"); json.Unmarshal([]byte(out), &p) != nil || p.Kind != plan.KindAdopt || p.State != plan.Done {
		t.Fatalf("adopt --unit: %s", out)
	}
	if p.Value(adopt.ValueUnit) != name || p.Value(adopt.ValueUnitFileState) != "enabled" {
		t.Errorf("the adopt plan recorded unit %q, state %q; want %s, enabled", p.Value(adopt.ValueUnit), p.Value(adopt.ValueUnitFileState), name)
	}
	if st, _ := sd.Systemctl("is-active", name); strings.TrimSpace(st) != "inactive" {
		t.Errorf("after the adoption %s is %q, want inactive", name, strings.TrimSpace(st))
	}
	if st, _ := sd.Systemctl("is-enabled", name); strings.TrimSpace(st) != "disabled" {
		t.Errorf("after the adoption %s is %q, want disabled", name, strings.TrimSpace(st))
	}
	st := e.WaitStatus(60*time.Second, m.Name+" running under the agent", func(st *status.Status) bool {
		ms, _ := st.Member(m.Name)
		return harness.Healthy(st) && ms.PID != 0
	})
	ms, _ := st.Member(m.Name)
	if cg := unitCgroup(ms.PID); cg == "/system.slice/"+name {
		t.Errorf("the agent's %s (pid %d) is in the unit's control group", m.Name, ms.PID)
	}
	if sm, _ := e.Spec().Member(m.Name); !sm.IsAdopted() || sm.DataDir != m.DataDir {
		t.Errorf("after the adoption the spec has %s with agent %q, data dir %q", m.Name, sm.Agent, sm.DataDir)
	}
	if err := syscall.Kill(ms.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.WaitStatus(60*time.Second, "the agent to restart "+m.Name+" after kill -9", func(st *status.Status) bool {
		n, _ := st.Member(m.Name)
		return harness.Healthy(st) && n.PID != 0 && n.PID != ms.PID
	})
	if st, _ := sd.Systemctl("is-active", name); strings.TrimSpace(st) != "inactive" {
		t.Errorf("after kill -9 of the adopted member systemd's %s is %q, want inactive", name, strings.TrimSpace(st))
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the restart", w.AckedAbove(w.Acked()+100))

	// Undo: systemd runs the member again.
	var u plan.Plan
	if out := run("adopt", "--undo", m.Name, "-o", "json"); json.Unmarshal([]byte(out), &u) != nil || u.Kind != plan.KindAdoptUndo || u.State != plan.Done || u.Of != p.ID {
		t.Fatalf("adopt --undo: %s", out)
	}
	if st, _ := sd.Systemctl("is-enabled", name); strings.TrimSpace(st) != "enabled" {
		t.Errorf("after the undo %s is %q, want enabled", name, strings.TrimSpace(st))
	}
	if st, _ := sd.Systemctl("is-active", name); strings.TrimSpace(st) != "active" {
		t.Errorf("after the undo %s is %q, want active", name, strings.TrimSpace(st))
	}
	if _, err := underUnit(); err != nil {
		t.Errorf("after the undo: %v", err)
	}
	after := requireGivenBack(t, e, fcli.MemberList, m.Name, id, p.ID, "the undo")
	if after.Header.ClusterId != before.Header.ClusterId {
		t.Errorf("after the undo: cluster %x, want %x", after.Header.ClusterId, before.Header.ClusterId)
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the undo", w.AckedAbove(w.Acked()+100))
	w.Finish(t)
}
