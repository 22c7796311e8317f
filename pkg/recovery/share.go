package recovery

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// The counts handed to the hosts (docs/metrics.md, "Automatic recovery
// across hosts"). A multi-host coordinator without members of its own runs
// no agent and serves no metrics, so the coordinator's RunAuto pushes its
// directory's counts (status/autorecovery.json, with its recorder ID) to
// every host's agent, which keeps them and exports them as
// steward_recovery_actions_total. Invariants:
//
//   - Every host's agent gets the counts as they are now: right after an
//     action is counted (autoLoop.counted), and at every tick to each
//     agent that has not acknowledged these counts (unreachable, or just
//     added): an action recorded while a host is cut off reaches it once
//     it answers again. An agent that acknowledged them gets them again
//     after resendAfter (its copy may have been lost). A coordinator
//     restarted knows of no acknowledgement and pushes to every agent.
//   - Pushes are whole counts, never increments: the agent keeps the
//     larger of each (recoverycount.Merge), so a repeated, late
//     or reordered push never counts an action twice nor goes backwards.

// resendAfter is how long an agent's acknowledgement of the current
// counts holds before they are pushed to it again.
const resendAfter = 5 * time.Minute

// shareTimeout bounds one push to one agent.
const shareTimeout = 5 * time.Second

// delivery is what an agent acknowledged and when.
type delivery struct {
	counts string // the counts, as JSON
	at     time.Time
}

// sharer pushes a coordinator directory's recovery counts to its hosts'
// agents. Only its own goroutine (run) uses it.
type sharer struct {
	dir string
	log *slog.Logger
	now func() time.Time
	// send pushes rc to the agent a (its PutRecoveryCounts; tests give
	// another).
	send func(ctx context.Context, c *cluster.Cluster, a spec.Agent, rc recoverycount.Counts) error
	// delivered is, per agent, the counts it last acknowledged.
	delivered map[string]delivery
	// failing is, per agent, the error of its last failed push (logged
	// once per change).
	failing map[string]string
}

func newSharer(dir string, log *slog.Logger) *sharer {
	return &sharer{dir: dir, log: log, now: time.Now, send: sendCounts,
		delivered: map[string]delivery{}, failing: map[string]string{}}
}

func sendCounts(ctx context.Context, c *cluster.Cluster, a spec.Agent, rc recoverycount.Counts) error {
	return c.PushRecoveryCounts(ctx, a.Name, rc)
}

// run pushes at every tick and whenever counted is signalled, until ctx
// ends.
func (s *sharer) run(ctx context.Context, counted <-chan struct{}) {
	tick := time.NewTicker(autoInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-counted:
		}
		s.round(ctx)
	}
}

// round pushes the counts to the agents that need them: only on a
// coordinator's directory of a multi-host cluster, once its state file
// has a recorder ID.
func (s *sharer) round(ctx context.Context) {
	c, err := cluster.Open(s.dir)
	if err != nil || !c.Spec.MultiHost() || !c.Admin() {
		return
	}
	st, err := status.ReadAutoRecovery(s.dir)
	if err != nil {
		s.logFailure("", err)
		return
	}
	delete(s.failing, "")
	rc, ok := st.Counts()
	if !ok {
		return
	}
	s.push(ctx, c, hostset.Remote(c.Spec), rc)
}

// push sends rc to each of hosts that is due (s.due), concurrently, and
// records the acknowledgements.
func (s *sharer) push(ctx context.Context, c *cluster.Cluster, hosts hostset.Hosts, rc recoverycount.Counts) {
	b, err := json.Marshal(rc)
	if err != nil {
		return
	}
	key := string(b)
	due := s.due(hosts.Names(), key, s.now())
	if len(due) == 0 {
		return
	}
	want := map[string]bool{}
	for _, n := range due {
		want[n] = true
	}
	rs := hostset.Each(ctx, hosts.Filter(func(a spec.Agent) bool { return want[a.Name] }), hostset.Options{Timeout: shareTimeout},
		func(ctx context.Context, a spec.Agent) (struct{}, error) {
			return struct{}{}, s.send(ctx, c, a, rc)
		})
	for _, r := range rs {
		if r.Err != nil {
			s.logFailure(r.Host.Name, r.Err)
			continue
		}
		s.delivered[r.Host.Name] = delivery{counts: key, at: s.now()}
		if s.failing[r.Host.Name] != "" {
			s.log.Info("automatic recovery's counts delivered", "agent", r.Host.Name)
			delete(s.failing, r.Host.Name)
		}
	}
}

// due returns the agents, of those named, that have not acknowledged the
// counts key, or did so more than resendAfter before now; agents no
// longer named are forgotten.
func (s *sharer) due(agents []string, key string, now time.Time) []string {
	named := map[string]bool{}
	var out []string
	for _, a := range agents {
		named[a] = true
		d, ok := s.delivered[a]
		if !ok || d.counts != key || now.Sub(d.at) >= resendAfter {
			out = append(out, a)
		}
	}
	for a := range s.delivered {
		if !named[a] {
			delete(s.delivered, a)
		}
	}
	for a := range s.failing {
		if !named[a] && a != "" {
			delete(s.failing, a)
		}
	}
	return out
}

// logFailure logs a failed push to agent (or, with agent "", a state file
// that cannot be read) when its error changed.
func (s *sharer) logFailure(agent string, err error) {
	if s.failing[agent] == err.Error() {
		return
	}
	s.failing[agent] = err.Error()
	if agent == "" {
		s.log.Warn("automatic recovery's counts not pushed to the hosts", "err", err)
		return
	}
	s.log.Warn("automatic recovery's counts not pushed to a host; retried", "agent", agent, "err", err)
}
