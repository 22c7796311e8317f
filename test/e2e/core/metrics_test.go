package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// TestMetricsPrometheus: a three-member cluster whose agent serves metrics
// on loopback (the spec's metricsAddress, named in `steward status -o json`),
// scraped every 3 s by a real Prometheus server running the shipped
// alert rules (deploy/prometheus, with StewardMemberDown's `for:` cut to
// 3 s). With every member up no alert about members fires; after `steward
// member stop` of one member, StewardMemberDown fires for that member
// alone (read through /api/v1/alerts), and resolves once it is started
// again.
func TestMetricsPrometheus(t *testing.T) {
	t.Parallel()
	promBin := prometheusBinary(t)
	e := harness.New(t)
	addr := net.JoinHostPort(e.Addr, strconv.Itoa(e.FreePorts(1)[0]))
	e.WriteSpec(3, binaries.EmbeddedVersion(), func(s *spec.Cluster) { s.Agents[0].MetricsAddress = addr })
	e.MustRun("up")
	names := e.Spec().MemberNames()

	st := e.Status()
	if len(st.Agents) != 1 || st.Agents[0].MetricsURL != "http://"+addr+"/metrics" {
		t.Fatalf("status agents %+v: want metricsURL http://%s/metrics", st.Agents, addr)
	}
	// The agent's own page: its members up, and the backup leader's series.
	harness.Eventually(t, 30*time.Second, 500*time.Millisecond, "the agent exports its members and its backups", func() error {
		body, err := harness.HTTPGet(t.Context(), st.Agents[0].MetricsURL)
		if err != nil {
			return err
		}
		for _, n := range names {
			if want := fmt.Sprintf(`steward_member_up{agent="local",cluster=%q,member=%q} 1`, e.Spec().Name, n); !strings.Contains(body, want) {
				return fmt.Errorf("no %s in\n%s", want, harness.GrepLines(body, "steward_member_up"))
			}
		}
		for _, want := range []string{"steward_backup_newest_revision{", "steward_backup_last_full_age_seconds{", "steward_cluster_quorate{agent=\"local\"", "steward_certificate_expiry_timestamp_seconds{"} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s series yet", strings.TrimSuffix(want, "{"))
			}
		}
		return nil
	})

	prom := startPrometheus(t, promBin, addr)
	harness.Eventually(t, 60*time.Second, time.Second, "Prometheus scrapes every member up", func() error {
		res, err := prom.query(t.Context(), "steward_member_up == 1")
		if err != nil {
			return err
		}
		if len(res) != len(names) {
			return fmt.Errorf("%d members up in Prometheus, want %d: %v", len(res), len(names), res)
		}
		return nil
	})
	if firing, err := prom.alerts(t.Context(), "StewardMemberDown"); err != nil || len(firing) > 0 {
		t.Fatalf("StewardMemberDown with every member up: %v %v", firing, err)
	}

	stopped := names[1]
	e.MustRun("member", "stop", stopped)
	harness.Eventually(t, 60*time.Second, time.Second, "StewardMemberDown fires for "+stopped, func() error {
		firing, err := prom.alerts(t.Context(), "StewardMemberDown")
		if err != nil {
			return err
		}
		if len(firing) != 1 || firing[0]["member"] != stopped || firing[0]["state"] != "firing" {
			return fmt.Errorf("StewardMemberDown alerts %v, want one firing for %s", firing, stopped)
		}
		return nil
	})

	e.MustRun("member", "start", stopped)
	harness.Eventually(t, 60*time.Second, time.Second, "StewardMemberDown resolves", func() error {
		firing, err := prom.alerts(t.Context(), "StewardMemberDown")
		if err != nil {
			return err
		}
		if len(firing) > 0 {
			return fmt.Errorf("still %v", firing)
		}
		return nil
	})
}

// prometheusBinary is STEWARD_TEST_PROMETHEUS, else prometheus on PATH; a
// missing one fails the test.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STEWARD_TEST_PROMETHEUS"); p != "" {
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (%v): run `make prometheus` or set STEWARD_TEST_PROMETHEUS", err)
	}
	return p
}

// promServer is a Prometheus server a test started.
type promServer struct{ base string }

// startPrometheus runs Prometheus in a temporary directory, scraping
// target (job "steward") every 3 s and evaluating the shipped alert
// rules every second, StewardMemberDown's `for:` cut to 3 s. It is killed
// (with its process group) when the test ends; a failed test prints the
// end of its log.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "deploy", "prometheus", "steward-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(rules)
	i := strings.Index(text, "alert: StewardMemberDown")
	j := strings.Index(text[i:], "for: 1m")
	if i < 0 || j < 0 {
		t.Fatal("steward-alerts.yml: no StewardMemberDown rule with `for: 1m`")
	}
	text = text[:i+j] + "for: 3s" + text[i+j+len("for: 1m"):]
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := spec.FreePort("127.0.0.1")()
	if err != nil {
		t.Fatal(err)
	}
	// A scrape with a member stopped takes about 2 s (the status probe of
	// that member waits out its timeout), so scrapes get 3 s.
	conf := fmt.Sprintf(`global:
  scrape_interval: 3s
  scrape_timeout: 3s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: steward
    static_configs:
      - targets: [%q]
`, filepath.Join(dir, "rules.yml"), target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+listen)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus.log (end):\n%s", harness.LastLines(string(b), 30))
		}
	})
	p := &promServer{base: "http://" + listen}
	harness.Eventually(t, 30*time.Second, 250*time.Millisecond, "Prometheus is ready", func() error {
		_, err := harness.HTTPGet(t.Context(), p.base+"/-/ready")
		return err
	})
	return p
}

// query runs an instant query and returns each result's labels.
func (p *promServer) query(ctx context.Context, q string) ([]map[string]string, error) {
	body, err := harness.HTTPGet(ctx, p.base+"/api/v1/query?query="+url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		return nil, fmt.Errorf("query %s: %v: %s", q, err, body)
	}
	var out []map[string]string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric)
	}
	return out, nil
}

// alerts returns the active alerts (pending or firing) named name, each
// as its labels plus "state".
func (p *promServer) alerts(ctx context.Context, name string) ([]map[string]string, error) {
	body, err := harness.HTTPGet(ctx, p.base+"/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		return nil, fmt.Errorf("alerts: %v: %s", err, body)
	}
	var out []map[string]string
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] != name {
			continue
		}
		l := map[string]string{"state": a.State}
		for k, v := range a.Labels {
			l[k] = v
		}
		out = append(out, l)
	}
	return out, nil
}
