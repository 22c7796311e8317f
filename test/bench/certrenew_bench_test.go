package bench

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// renewWindow is how long the writer runs in each phase of
// BenchmarkCertRenewal (the renewal and the baseline alike).
const renewWindow = 20 * time.Second

// BenchmarkCertRenewal: client errors and the longest write stall while
// every member's leaves are renewed, on three hosts (network namespaces,
// one agent each, the coordinator and the client in the root namespace).
// One client writes 1 KiB values back to back (one attempt of 2 s per
// write: every failed attempt is a client error) for renewWindow, during
// which `steward certs renew --all` runs twice on the coordinator: each
// time every host's server, peer, agent and client certificate is
// reissued, installed by the host's agent and served by the members in
// new handshakes (no restart). The baseline, in the same run on the same
// cluster: the same writer for renewWindow with no renewal.
func BenchmarkCertRenewal(b *testing.B) {
	for range b.N {
		hs := harness.NewHosts(b, 3)
		hs.Init("3.6.16")
		hs.StartAgents()
		hs.MustRun("up")
		hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
		// The writer's own client certificate (not renewed under it).
		cli := hs.IssuedClient("writer")
		opts := workload.Options{Wrap: 1000, Value: strings.Repeat("w", 1024), Timeout: 2 * time.Second}

		// The renewal: twice every member's leaves.
		opts.Prefix = "renew"
		w := workload.Start(b, cli, opts)
		start := time.Now()
		time.Sleep(2 * time.Second) // the writer's steady state first
		renewed := 0
		var took []time.Duration
		var during [][2]time.Time // when each renewal ran
		for range 2 {
			t0 := time.Now()
			var rs []pki.Renewal
			if err := json.Unmarshal([]byte(hs.MustRun("certs", "renew", "--all", "-o", "json")), &rs); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(t0))
			during = append(during, [2]time.Time{t0, time.Now()})
			renewed += len(rs)
		}
		time.Sleep(renewWindow - time.Since(start))
		rr := w.Stop()

		// The baseline: the same writer, no renewal.
		opts.Prefix = "base"
		bw := workload.Start(b, cli, opts)
		time.Sleep(renewWindow)
		br := bw.Stop()
		cli.Close()

		rp50, rp99, rmax := quantiles(rr)
		bp50, bp99, bmax := quantiles(br)
		inRenewal := gapDuring(rr, during)
		b.ReportMetric(float64(rr.FailedAttempts), "renewal-errors")
		b.ReportMetric(ms(inRenewal), "renewal-stall-during-renew-ms")
		b.ReportMetric(ms(rr.LongestGap()), "renewal-max-stall-ms")
		b.ReportMetric(ms(rmax), "renewal-max-latency-ms")
		b.ReportMetric(float64(br.FailedAttempts), "baseline-errors")
		b.ReportMetric(ms(br.LongestGap()), "baseline-max-stall-ms")
		b.ReportMetric(ms(bmax), "baseline-max-latency-ms")
		b.Logf("renewal (certs renew --all x2: %d certificates, took %v): %s; p50 %.1f ms, p99 %.1f ms, max %.1f ms, longest gap %.1f ms (%.1f ms while a renewal ran)",
			renewed, took, rr, ms(rp50), ms(rp99), ms(rmax), ms(rr.LongestGap()), ms(inRenewal))
		b.Logf("baseline (no renewal): %s; p50 %.1f ms, p99 %.1f ms, max %.1f ms, longest gap %.1f ms",
			br, ms(bp50), ms(bp99), ms(bmax), ms(br.LongestGap()))
	}
}

// gapDuring is the longest time between two consecutive acknowledgements
// of r that overlaps one of the intervals.
func gapDuring(r *workload.Result, intervals [][2]time.Time) time.Duration {
	at := make([]time.Time, len(r.Acked))
	for i, wr := range r.Acked {
		at[i] = wr.End
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		for _, iv := range intervals {
			if at[i-1].Before(iv[1]) && at[i].After(iv[0]) {
				longest = max(longest, at[i].Sub(at[i-1]))
			}
		}
	}
	return longest
}

// quantiles are the p50, p99 and largest latency of a writer's
// acknowledged writes.
func quantiles(r *workload.Result) (p50, p99, largest time.Duration) {
	d := r.Latencies()
	if len(d) == 0 {
		return 0, 0, 0
	}
	q := func(p float64) time.Duration { return d[int(float64(len(d)-1)*p)] }
	return q(0.5), q(0.99), d[len(d)-1]
}
