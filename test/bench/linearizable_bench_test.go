package bench

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// LeaderLossRetries are the client errors docs/upgrades.md tells
// applications to retry once: the two a leadership transfer causes.
var LeaderLossRetries = []string{"raft proposal dropped", "leader changed"}

// BenchmarkUpgradeClientErrors: the client errors, by kind, and the longest
// stall that plain clientv3 clients see during a rolling upgrade of three
// members across two minors (oldest to newest test version) and the
// rollback, in one run for two groups of four clients on their own keys:
// raw (clientv3's own retries only), and retrying an operation once after
// `raft proposal dropped` or `leader changed` (the documented advice;
// goal: zero failed writes). Both groups' histories are checked for
// linearizability, and the leadership changes of each operation counted.
func BenchmarkUpgradeClientErrors(b *testing.B) {
	vs := harness.Versions()
	for range b.N {
		e := harness.New(b)
		e.Up(3, vs[0])
		leaders := workload.WatchLeaders(b, e.Client(), 100*time.Millisecond)
		kvs := func() []clientv3.KV {
			var kvs []clientv3.KV
			for range 4 {
				kvs = append(kvs, e.Client())
			}
			return kvs
		}
		rawKVs, retryKVs := kvs(), kvs()
		var reports []workload.PhaseReport
		var raw, retry []*workload.LinResult
		for _, op := range []struct {
			name string
			args []string
			to   string
		}{
			{"upgrade " + vs[0] + " to " + vs[2], []string{"upgrade", "apply", "--to", vs[2]}, vs[2]},
			{"rollback to " + vs[0], []string{"rollback"}, vs[0]},
		} {
			rc := workload.StartLinearizable(b, rawKVs, workload.LinOptions{Prefix: "raw/" + op.args[0]})
			tc := workload.StartLinearizable(b, retryKVs, workload.LinOptions{Prefix: "retry/" + op.args[0], RetryOnce: LeaderLossRetries})
			m := leaders.Mark()
			start := time.Now()
			e.MustRun(op.args...)
			e.WaitStatus(time.Minute, "every member on "+op.to, func(st *status.Status) bool {
				return harness.Healthy(st) && st.Members[0].Version == op.to && st.Members[len(st.Members)-1].Version == op.to
			})
			took := time.Since(start)
			r, t := rc.Stop(), tc.Stop()
			changes, terms := leaders.Since(m)
			logLeaderChanges(b, e, op.name, start, leaders.TermsSince(m))
			raw, retry = append(raw, r), append(retry, t)
			reports = append(reports,
				workload.PhaseReport{Name: op.name + ", raw", Took: took, LeaderChanges: changes, TermDelta: terms, Result: r},
				workload.PhaseReport{Name: op.name + ", retrying once", Took: took, LeaderChanges: changes, TermDelta: terms, Result: t})
		}
		b.Logf("client errors through the rolling upgrade and rollback (4 raw clients and 4 retrying ones, at once):\n%s", workload.FormatReports(reports))
		var rawFailed, retryFailed int
		var rawStall, retryStall time.Duration
		for i := range raw {
			rawFailed += raw[i].FailedWrites()
			retryFailed += retry[i].FailedWrites()
			rawStall = max(rawStall, raw[i].LongestStall())
			retryStall = max(retryStall, retry[i].LongestStall())
			workload.RequireLinearizable(b, reports[2*i].Name, raw[i])
			workload.RequireLinearizable(b, reports[2*i+1].Name, retry[i])
		}
		b.ReportMetric(float64(rawFailed), "raw-failed-writes")
		b.ReportMetric(hostsbench.MS(rawStall), "raw-max-stall-ms")
		b.ReportMetric(float64(retryFailed), "retry-failed-writes")
		b.ReportMetric(hostsbench.MS(retryStall), "retry-max-stall-ms")
	}
}

// logLeaderChanges logs each leadership change an operation made, with
// the new leader's name and the step of the operation's plan that was
// running when the watch saw it (the watch polls every 100 ms, so a change
// at the very end of a step may be seen in the next one).
func logLeaderChanges(b *testing.B, e *harness.Env, what string, start time.Time, terms []workload.LeaderTerm) {
	var p plan.Plan
	if err := json.Unmarshal([]byte(e.MustRun("plan", "show", "-o", "json")), &p); err != nil {
		b.Fatal(err)
	}
	names := map[string]string{}
	for _, m := range e.Status().Members {
		names[m.ID] = m.Name
	}
	for _, lt := range terms {
		step := "between steps"
		for _, s := range p.Steps {
			if s.StartedAt != nil && !lt.Seen.Before(*s.StartedAt) && (s.EndedAt == nil || !lt.Seen.After(*s.EndedAt)) {
				step = fmt.Sprintf("step %d %s %s %s", s.Index, s.Kind, s.Member, s.Version)
			}
		}
		leader := fmt.Sprintf("%x", lt.Leader)
		if n, ok := names[leader]; ok {
			leader = n
		}
		b.Logf("%s: term %d, leader %s, seen %s in, during %s", what, lt.Term, leader, lt.Seen.Sub(start).Round(100*time.Millisecond), step)
	}
}
