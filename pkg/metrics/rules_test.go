package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/status"
)

// deployDir is the repository's deploy/ directory.
func deployDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// promtool finds promtool. Under `make test` (STEWARD_TEST_STORE set) a
// missing one fails the test: skipping is not passing.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("STEWARD_TEST_STORE") != "" {
		t.Fatalf("promtool not found (%v): run `make prometheus` (hack/install-prometheus.sh installs Debian's prometheus package)", err)
	}
	t.Skip("promtool not found; `make prometheus` installs it (this test fails instead under make test)")
	return ""
}

// TestAlertRules runs the alert rules' unit tests
// (deploy/prometheus/*_test.yml) with promtool, after checking the rules.
func TestAlertRules(t *testing.T) {
	tool := promtool(t)
	dir := filepath.Join(deployDir(t), "prometheus")
	rules, _ := filepath.Glob(filepath.Join(dir, "*.yml"))
	var tests, files []string
	for _, f := range rules {
		if strings.HasSuffix(f, "_test.yml") {
			tests = append(tests, f)
		} else {
			files = append(files, f)
		}
	}
	if len(files) == 0 || len(tests) == 0 {
		t.Fatalf("no rules (%v) or no rule tests (%v) in %s", files, tests, dir)
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, files...), append([]string{"test", "rules"}, tests...)} {
		cmd := exec.CommandContext(t.Context(), tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// exported is every Steward series name a registry can export: a
// snapshot with every part filled in, and the event counters.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	now := time.Now()
	st := fixedStatus()
	st.CertificateRenewal = &status.RenewalStatus{Running: true, RenewalState: status.RenewalState{PID: 1, Heartbeat: now}}
	snap := Snapshot{
		Status: st,
		Loop: &backup.LoopStatus{Agent: "a", Role: "leader", Recording: true, NextRevision: 101,
			LastFull: now.Add(-2 * time.Hour), LastDelta: now.Add(-time.Second)},
		FullSchedule: "0 * * * *", RecoveryPointGoal: 250 * time.Millisecond,
		Plan:           &plan.Plan{ID: "p", Kind: plan.KindUpgrade, State: plan.Failed, Steps: []plan.Step{{State: plan.Failed}}},
		Certificates:   []Certificate{{Name: "server", NotAfter: now.Add(time.Hour)}},
		RecoveryCounts: []recoverycount.Counts{{Recorder: "0123456789abcdef"}},
	}
	col := NewCollector("a", func(context.Context) Snapshot { return snap }, slog.New(slog.DiscardHandler))
	reg, err := NewRegistry("prod", "a", col)
	if err != nil {
		t.Fatal(err)
	}
	// The delta lag shows from the second scrape on.
	for range 2 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

var seriesName = regexp.MustCompile(`\bsteward_[a-z_]+\b`)

// TestRulesAndDashboardUseExportedMetrics: every Steward series the alert
// rules and the Grafana dashboard query exists, and every dashboard query
// parses (promtool checks each as a recording rule).
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	names := exported(t)
	for _, n := range []string{"steward_member_up", "steward_backup_delta_lag_seconds", "steward_plan_state", "steward_recovery_actions_total"} {
		if !names[n] {
			t.Fatalf("the full snapshot does not export %s: the test's snapshot is incomplete", n)
		}
	}
	d := deployDir(t)
	rules, err := os.ReadFile(filepath.Join(d, "prometheus", "steward-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dashFile := filepath.Join(d, "grafana", "steward-dashboard.json")
	raw, err := os.ReadFile(dashFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashFile, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: %d queries, want the dashboard's panels", dashFile, len(exprs))
	}
	used := seriesName.FindAllString(string(rules)+"\n"+strings.Join(exprs, "\n"), -1)
	slices.Sort(used)
	for _, n := range slices.Compact(used) {
		if !names[n] {
			t.Errorf("%s is queried by the rules or the dashboard but no agent exports it", n)
		}
	}

	tool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("STEWARD_TEST_STORE") != "" {
			t.Fatalf("promtool not found: run `make prometheus`")
		}
		t.Log("promtool not found: the dashboard's queries are not parsed")
		return
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(strings.ReplaceAll(e, "$cluster", "prod"))
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), tool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("the dashboard's queries do not all parse: %v\n%s", err, out)
	}
}
