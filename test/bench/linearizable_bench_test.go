package bench

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/cluster"
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
			e.WaitStatus(time.Minute, "every member on "+op.to, func(st *cluster.Status) bool {
				return harness.Healthy(st) && st.Members[0].Version == op.to && st.Members[len(st.Members)-1].Version == op.to
			})
			took := time.Since(start)
			r, t := rc.Stop(), tc.Stop()
			changes, terms := leaders.Since(m)
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
		b.ReportMetric(ms(rawStall), "raw-max-stall-ms")
		b.ReportMetric(float64(retryFailed), "retry-failed-writes")
		b.ReportMetric(ms(retryStall), "retry-max-stall-ms")
	}
}
