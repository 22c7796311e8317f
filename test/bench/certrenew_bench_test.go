package bench

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// renewWindow is how long the writer runs in each phase of
// BenchmarkCertRenewal and BenchmarkCARotation (the operation's window,
// at least, and the baseline alike).
const renewWindow = 20 * time.Second

// stallOptions is the writer of the certificate benchmarks: 1 KiB values
// back to back over a thousand keys, one attempt of at most 2 s per write
// (every failed attempt is a client error).
func stallOptions() workload.Options {
	return workload.Options{Wrap: 1000, Value: strings.Repeat("w", 1024), Timeout: 2 * time.Second}
}

// stallRun is one window of the writer: what it recorded, and when the
// operation measured ran (none for a baseline).
type stallRun struct {
	r      *workload.Result
	during [][2]time.Time
}

// underWrites runs the writer (opts, keys under prefix) for at least
// window. With act, the writer first runs 2 s alone (its steady state),
// then act runs, calling ran with each interval in which the operation
// measured ran; the window then ends no sooner than 1 s after act
// returned. Without act it is a baseline window.
func underWrites(b *testing.B, cli *clientv3.Client, opts workload.Options, prefix string, window time.Duration, act func(ran func(from, to time.Time))) stallRun {
	opts.Prefix = prefix
	w := workload.Start(b, cli, opts)
	start := time.Now()
	var sr stallRun
	if act != nil {
		time.Sleep(2 * time.Second)
		act(func(from, to time.Time) { sr.during = append(sr.during, [2]time.Time{from, to}) })
		time.Sleep(max(time.Second, window-time.Since(start)))
	} else {
		time.Sleep(window)
	}
	sr.r = w.Stop()
	return sr
}

// report reports the window's client errors, longest stall and largest
// latency as NAME-errors, NAME-max-stall-ms, NAME-max-latency-ms and,
// with intervals, the longest stall overlapping one as
// NAME-stall-during-OP-ms; it logs the window's figures.
func (s stallRun) report(b *testing.B, name, op, what string) {
	p50, p99, largest := quantiles(s.r)
	b.ReportMetric(float64(s.r.FailedAttempts), name+"-errors")
	line := fmt.Sprintf("%s: %s; p50 %.1f ms, p99 %.1f ms, max %.1f ms, longest gap %.1f ms",
		what, s.r, hostsbench.MS(p50), hostsbench.MS(p99), hostsbench.MS(largest), hostsbench.MS(s.r.LongestGap()))
	if s.during != nil {
		in := gapDuring(s.r, s.during)
		b.ReportMetric(hostsbench.MS(in), name+"-stall-during-"+op+"-ms")
		line += fmt.Sprintf(" (%.1f ms while %s ran)", hostsbench.MS(in), op)
	}
	b.ReportMetric(hostsbench.MS(s.r.LongestGap()), name+"-max-stall-ms")
	b.ReportMetric(hostsbench.MS(largest), name+"-max-latency-ms")
	b.Logf("%s; load %s", line, hostsbench.Loadavg())
}

// BenchmarkCertRenewal: client errors and the longest write stall while
// every member's leaves are renewed, on three hosts (network namespaces,
// one agent each, the coordinator and the client in the root namespace).
// One client writes (stallOptions) for renewWindow, during which `steward
// certs renew --all` runs twice on the coordinator: each time every
// host's server, peer, agent and client certificate is reissued,
// installed by the host's agent and served by the members in new
// handshakes (no restart). The baseline, in the same run on the same
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

		// The renewal: twice every member's leaves.
		renewed := 0
		var took []time.Duration
		rr := underWrites(b, cli, stallOptions(), "renew", renewWindow, func(ran func(from, to time.Time)) {
			for range 2 {
				t0 := time.Now()
				var rs []pki.Renewal
				if err := json.Unmarshal([]byte(hs.MustRun("certs", "renew", "--all", "-o", "json")), &rs); err != nil {
					b.Fatal(err)
				}
				ran(t0, time.Now())
				took = append(took, time.Since(t0))
				renewed += len(rs)
			}
		})
		// The baseline: the same writer, no renewal.
		br := underWrites(b, cli, stallOptions(), "base", renewWindow, nil)
		cli.Close()

		rr.report(b, "renewal", "renew", fmt.Sprintf("renewal (certs renew --all x2: %d certificates, took %v)", renewed, took))
		br.report(b, "baseline", "", "baseline (no renewal)")
	}
}

// BenchmarkCARotation: client errors and the longest write stall during a
// full CA rotation (`steward certs rotate-ca`: a new CA cross-signed by the
// old, trusted beside it, every leaf reissued from it, the old one
// dropped, the members restarted one at a time with the leadership moved
// first), on three members on one host (rotation is not yet done across
// joined hosts). The client follows the plan (it re-reads the CA bundle
// and its issued client certificate, which the rotation reissues, at each
// new connection: harness.FollowingTLS) and writes (stallOptions) through
// every member's endpoint from 2 s before the rotation until 1 s after it
// (at least renewWindow). The baseline, in the same run on the same
// cluster right after: the same writer for renewWindow with no rotation.
func BenchmarkCARotation(b *testing.B) {
	for range b.N {
		e := harness.New(b)
		e.Up(3, "3.6.16")
		s := e.Spec()
		dir := s.CertDir(e.Dir)
		e.MustRun("certs", "issue-client", "writer")
		var eps []string
		for _, m := range s.Members {
			eps = append(eps, m.ClientURL)
		}
		tc := harness.FollowingTLS(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.ClientsDir, "writer.crt"), filepath.Join(dir, pki.ClientsDir, "writer.key"))
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			b.Fatal(err)
		}

		var took time.Duration
		rr := underWrites(b, cli, stallOptions(), "rotate", renewWindow, func(ran func(from, to time.Time)) {
			t0 := time.Now()
			e.MustRun("certs", "rotate-ca")
			ran(t0, time.Now())
			took = time.Since(t0)
		})
		br := underWrites(b, cli, stallOptions(), "base", renewWindow, nil)
		cli.Close()

		// Where the stalls fell: each step of the rotation's plan, its
		// time and the longest gap overlapping it.
		var p plan.Plan
		if err := json.Unmarshal([]byte(e.MustRun("plan", "show", "-o", "json")), &p); err != nil {
			b.Fatal(err)
		}
		for _, st := range p.Steps {
			if st.StartedAt == nil || st.EndedAt == nil {
				continue
			}
			gap := gapDuring(rr.r, [][2]time.Time{{*st.StartedAt, *st.EndedAt}})
			b.Logf("  step %d %s %s: %s, longest gap %.1f ms", st.Index, st.Kind, st.Member, st.EndedAt.Sub(*st.StartedAt).Round(time.Millisecond), hostsbench.MS(gap))
		}
		b.ReportMetric(took.Seconds(), "rotation-s")
		rr.report(b, "rotation", "rotate", fmt.Sprintf("CA rotation (certs rotate-ca, took %v)", took.Round(10*time.Millisecond)))
		br.report(b, "baseline", "", "baseline (no rotation)")
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
