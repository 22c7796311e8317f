package bench

import (
	"testing"
	"time"

	"github.com/etcd-steward/steward/test/harness"
)

// BenchmarkRollingUpgrade: client errors and the longest write stall while
// Steward upgrades three members across two minors (3.5 -> 3.6 -> 3.7,
// leadership moved away before each leader swap), against the naive way in
// the same run: two rounds of stopping and starting each member in place
// without moving leadership (on one version, so only the restarts count).
func BenchmarkRollingUpgrade(b *testing.B) {
	vs := harness.Versions()
	for range b.N {
		e := harness.New(b)
		e.Up(3, vs[0])
		cli := e.Client()
		l := measureWrites(cli)
		start := time.Now()
		e.MustRun("upgrade", "apply", "--to", vs[2])
		took := time.Since(start)
		p50, p99, stall, n, errs := l.finish()
		cli.Close()

		ne := harness.New(b)
		ne.Up(3, vs[0])
		ncli := ne.Client()
		nl := measureWrites(ncli)
		nstart := time.Now()
		for range 2 {
			for _, name := range ne.Spec().MemberNames() {
				ne.MustRun("member", "stop", name)
				ne.MustRun("member", "start", name)
				ne.WaitStatus(time.Minute, name+" healthy", harness.Healthy)
			}
		}
		ntook := time.Since(nstart)
		np50, np99, nstall, nn, nerrs := nl.finish()
		ncli.Close()

		b.ReportMetric(float64(errs), "steward-errors")
		b.ReportMetric(ms(stall), "steward-max-stall-ms")
		b.ReportMetric(float64(nerrs), "naive-errors")
		b.ReportMetric(ms(nstall), "naive-max-stall-ms")
		b.Logf("steward rolling upgrade %s -> %s in %s: %d writes, %d errors, p50 %.1f ms, p99 %.1f ms, longest stall %.0f ms",
			vs[0], vs[2], took.Round(time.Second), n, errs, ms(p50), ms(p99), ms(stall))
		b.Logf("naive restarts (2 rounds, leader not moved) in %s: %d writes, %d errors, p50 %.1f ms, p99 %.1f ms, longest stall %.0f ms",
			ntook.Round(time.Second), nn, nerrs, ms(np50), ms(np99), ms(nstall))
	}
}
