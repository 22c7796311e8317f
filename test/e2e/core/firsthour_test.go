package core_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/test/harness"
)

// TestMetricsOnByDefault: `steward up` writes a spec whose agent serves
// Prometheus metrics on the members' loopback address at a port picked
// free (clusters side by side on their own loopback addresses never
// collide), as etcd serves its own; `up --no-metrics` writes one that
// serves none, and is refused on an existing spec that serves them.
// Before, metrics were off unless the spec was edited.
func TestMetricsOnByDefault(t *testing.T) {
	t.Parallel()
	v := binaries.EmbeddedVersion()
	e := harness.New(t)
	e.Up(1, v)
	st := e.Status()
	if len(st.Agents) != 1 || !strings.HasPrefix(st.Agents[0].MetricsURL, "http://"+e.Addr+":") {
		t.Fatalf("status agents %+v: want a metricsURL on http://%s:PORT", st.Agents, e.Addr)
	}
	harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "the agent serves metrics", func() error {
		body, err := harness.HTTPGet(t.Context(), st.Agents[0].MetricsURL)
		if err == nil && !strings.Contains(body, `steward_member_up{agent="local"`) {
			return strconv.ErrSyntax
		}
		return err
	})
	if out := e.MustFail("up", "--no-metrics"); !strings.Contains(out, "--no-metrics: ") || !strings.Contains(out, "remove metricsAddress") {
		t.Errorf("up --no-metrics on a cluster serving metrics: %s", out)
	}

	off := harness.New(t)
	off.MustRun("up", "--members", "1", "--binary-store", off.Store, "--address", off.Addr, "--no-metrics")
	if st := off.Status(); len(st.Agents) != 1 || st.Agents[0].MetricsURL != "" {
		t.Errorf("up --no-metrics: status agents %+v, want no metricsURL", st.Agents)
	}
}
