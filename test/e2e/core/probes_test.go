package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// probe GETs a probe path of an agent's --probe-address.
func probe(ctx context.Context, base, path string) (int, agent.Readiness, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, agent.Readiness{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, agent.Readiness{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, agent.Readiness{}, err
	}
	var rd agent.Readiness
	if strings.HasPrefix(path, "/readyz") {
		if err := json.Unmarshal(b, &rd); err != nil {
			return resp.StatusCode, rd, fmt.Errorf("%s: %v: %s", path, err, b)
		}
		if (resp.StatusCode == http.StatusOK) != rd.Ready {
			return resp.StatusCode, rd, fmt.Errorf("%s answered %d with ready %v", path, resp.StatusCode, rd.Ready)
		}
	}
	return resp.StatusCode, rd, nil
}

// reasonWatch polls /readyz?member=NAME as fast as a kubelet never would,
// and keeps each change of the member's reason.
type reasonWatch struct {
	stop func()
	mu   sync.Mutex
	seen []string      // guarded by mu
	errs []error       // guarded by mu
	n    int           // guarded by mu: probes made
	slow time.Duration // guarded by mu: the longest
}

func watchReasons(t *testing.T, base, member string) *reasonWatch {
	w := &reasonWatch{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			start := time.Now()
			_, rd, err := probe(ctx, base, "/readyz?member="+member)
			w.mu.Lock()
			w.n++
			w.slow = max(w.slow, time.Since(start))
			switch {
			case err != nil && ctx.Err() == nil:
				w.errs = append(w.errs, err)
			case err == nil && len(rd.Members) == 1:
				r := rd.Members[0].Reason
				if len(w.seen) == 0 || w.seen[len(w.seen)-1] != r {
					w.seen = append(w.seen, r)
				}
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	w.stop = func() { cancel(); <-done }
	t.Cleanup(w.stop)
	return w
}

func (w *reasonWatch) result() ([]string, []error) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen), slices.Clone(w.errs)
}

// TestAgentProbes: the agent's --probe-address serves /livez while it
// runs and /readyz while its members are started voting members, caught
// up: not while a member added is a learner (ready once promoted), nor
// while a member is stopped, or restarted by an operation (the agent API's
// restart, which upgrades, CA rotations and take-overs use).
func TestAgentProbes(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	addr := net.JoinHostPort(e.Addr, strconv.Itoa(e.FreePorts(1)[0]))
	base := "http://" + addr
	e.StartLocalAgent("--probe-address", addr)
	ctx := t.Context()

	if code, _, err := probe(ctx, base, "/livez"); err != nil || code != http.StatusOK {
		t.Fatalf("/livez = %d, %v; want 200", code, err)
	}
	if code, rd, err := probe(ctx, base, "/readyz"); err != nil || code != http.StatusServiceUnavailable || len(rd.Members) != 0 {
		t.Fatalf("/readyz of an agent without members = %d %+v, %v; want 503 and no member", code, rd, err)
	}

	e.Up(3, harness.Versions()[1])
	names := e.Spec().MemberNames()
	var rd agent.Readiness
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "/readyz to answer 200", func() error {
		code, r, err := probe(ctx, base, "/readyz")
		if err != nil {
			return err
		}
		if rd = r; code != http.StatusOK {
			return fmt.Errorf("%d: %+v", code, r)
		}
		return nil
	})
	leaders := 0
	for i, m := range rd.Members {
		if m.Name != names[i] || !m.Ready || m.Reason != agent.ReasonReady || m.ID == "" {
			t.Errorf("member %d: %+v", i, m)
		}
		if m.Role == "Leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v", leaders, rd.Members)
	}

	// A member added: a learner first (not ready), ready once promoted.
	// Data to catch up on keeps it a learner for a moment.
	cli := e.Client()
	for i := range 200 {
		if _, err := cli.Put(ctx, fmt.Sprintf("seed/%d", i), strings.Repeat("x", 4096)); err != nil {
			t.Fatal(err)
		}
	}
	w := watchReasons(t, base, "etcd-4")
	e.MustRun("member", "add", "etcd-4")
	harness.Eventually(t, 30*time.Second, 50*time.Millisecond, "etcd-4 to be ready", func() error {
		code, r, err := probe(ctx, base, "/readyz?member=etcd-4")
		if err != nil {
			return err
		}
		if code != http.StatusOK || len(r.Members) != 1 || r.Members[0].Role != "Member" && r.Members[0].Role != "Leader" {
			return fmt.Errorf("%d: %+v", code, r)
		}
		return nil
	})
	seen, errs := w.result()
	t.Logf("etcd-4's readiness through member add: %v", seen)
	if len(errs) > 0 {
		t.Errorf("probe errors: %v", errs)
	}
	// Not ready until the add is done (its learner runs on a private
	// client URL, then moves to its own): Ready only at the end (the
	// watch may stop before it sees it).
	if i := slices.Index(seen, agent.ReasonReady); i >= 0 && i != len(seen)-1 {
		t.Errorf("etcd-4's reasons through member add %v: want Ready only at the end", seen)
	}

	// A member stopped: not ready, and the agent's /readyz with it.
	e.MustRun("member", "stop", names[1])
	code, r, err := probe(ctx, base, "/readyz")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with %s stopped = %d %+v, %v; want 503", names[1], code, r, err)
	}
	for _, m := range r.Members {
		if want := m.Name != names[1]; m.Ready != want || !want && m.Reason != agent.ReasonStopped {
			t.Errorf("with %s stopped: %+v", names[1], m)
		}
	}
	e.MustRun("member", "start", names[1])
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, names[1]+" to be ready again", func() error {
		if code, r, err := probe(ctx, base, "/readyz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %+v, %v", code, r, err)
		}
		return nil
	})

	// A restart by an operation: not ready from the moment it stops until
	// it runs again.
	ac, err := agentapi.NewClient("unix://" + agent.SocketPath(e.Dir))
	if err != nil {
		t.Fatal(err)
	}
	w = watchReasons(t, base, names[2])
	harness.Eventually(t, 10*time.Second, 20*time.Millisecond, "the watch to see "+names[2]+" ready", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !slices.Contains(w.seen, agent.ReasonReady) {
			return fmt.Errorf("seen %v", w.seen)
		}
		return nil
	})
	restartStart := time.Now()
	st, err := ac.Restart(ctx, names[2])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s restarted in %s (state %s)", names[2], time.Since(restartStart).Round(time.Millisecond), st.State)
	harness.Eventually(t, 30*time.Second, 50*time.Millisecond, names[2]+" to be ready after its restart", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := len(w.seen); n < 3 || w.seen[n-1] != agent.ReasonReady {
			return fmt.Errorf("seen %v in %d probes (errors: %v)", w.seen, w.n, w.errs)
		}
		return nil
	})
	seen, errs = w.result()
	t.Logf("%s's readiness through a restart: %v (%d probes, the longest %s)", names[2], seen, w.n, w.slow)
	if len(errs) > 0 {
		t.Errorf("probe errors: %v", errs)
	}
	if seen[0] != agent.ReasonReady || !slices.ContainsFunc(seen[1:len(seen)-1], func(r string) bool { return r == agent.ReasonStopped || r == agent.ReasonNotStarted }) {
		t.Errorf("%s's reasons through a restart %v: want Ready, Stopped or NotStarted, Ready", names[2], seen)
	}
	// A learner that runs (started, answering) stays not ready, as a
	// Learner, until it is promoted. Added with etcd's API and run by the
	// agent, so that nothing promotes it before the test does.
	learnerReady(t, e, base, cli)

	if code, _, err := probe(ctx, base, "/livez"); err != nil || code != http.StatusOK {
		t.Errorf("/livez = %d, %v; want 200", code, err)
	}
}

// learnerReady adds learner-1 as a learner (etcd's MemberAddAsLearner),
// has the agent run it, waits for /readyz to call it a Learner (not
// ready) and promotes it: then it is ready.
func learnerReady(t *testing.T, e *harness.Env, base string, cli *clientv3.Client) {
	t.Helper()
	ctx := t.Context()
	s := e.Spec()
	ports := e.FreePorts(2)
	m := s.Members[0]
	m.Name = "learner-1"
	m.ClientURL, m.PeerURL = e.URL(s.Scheme(), ports[0]), e.URL(s.Scheme(), ports[1])
	m.DataDir = filepath.Join("members", m.Name, "data")
	// etcd refuses a member while one restarted just now ("unhealthy
	// cluster"): a refused add added nothing.
	var resp *clientv3.MemberAddResponse
	harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "etcd to add learner-1", func() (err error) {
		resp, err = cli.MemberAddAsLearner(ctx, []string{m.PeerURL})
		return err
	})
	var initial []string
	for _, pm := range resp.Members {
		n := pm.Name
		if pm.ID == resp.Member.ID {
			n = m.Name
		}
		for _, u := range pm.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	m.Bootstrap = &spec.Bootstrap{InitialCluster: strings.Join(initial, ",")}
	c, err := cluster.Open(e.Dir)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := agentapi.NewClient("unix://" + agent.SocketPath(e.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Start(ctx, m.Name); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "learner-1 to run, as a learner", func() error {
		code, r, err := probe(ctx, base, "/readyz?member=learner-1")
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || len(r.Members) != 1 || r.Members[0].Reason != agent.ReasonLearner || r.Members[0].Role != "Learner" {
			return fmt.Errorf("%d %+v", code, r)
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "learner-1's promotion", func() error {
		_, err := cli.MemberPromote(ctx, resp.Member.ID)
		return err
	})
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "learner-1 to be ready once promoted", func() error {
		code, r, err := probe(ctx, base, "/readyz?member=learner-1")
		if err != nil {
			return err
		}
		if code != http.StatusOK || r.Members[0].Role != "Member" && r.Members[0].Role != "Leader" {
			return fmt.Errorf("%d %+v", code, r)
		}
		return nil
	})
}
