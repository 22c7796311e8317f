package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
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
		l := hostsbench.MeasureWrites(b, cli)
		start := time.Now()
		e.MustRun("upgrade", "apply", "--to", vs[2])
		took := time.Since(start)
		p50, p99, stall, n, errs := hostsbench.WriteLatencies(l)
		cli.Close()

		ne := harness.New(b)
		ne.Up(3, vs[0])
		ncli := ne.Client()
		nl := hostsbench.MeasureWrites(b, ncli)
		nstart := time.Now()
		for range 2 {
			for _, name := range ne.Spec().MemberNames() {
				ne.MustRun("member", "stop", name)
				ne.MustRun("member", "start", name)
				ne.WaitStatus(time.Minute, name+" healthy", harness.Healthy)
			}
		}
		ntook := time.Since(nstart)
		np50, np99, nstall, nn, nerrs := hostsbench.WriteLatencies(nl)
		ncli.Close()

		b.ReportMetric(float64(errs), "steward-errors")
		b.ReportMetric(hostsbench.MS(stall), "steward-max-stall-ms")
		b.ReportMetric(float64(nerrs), "naive-errors")
		b.ReportMetric(hostsbench.MS(nstall), "naive-max-stall-ms")
		b.Logf("steward rolling upgrade %s -> %s in %s: %d writes, %d errors, p50 %.1f ms, p99 %.1f ms, longest stall %.0f ms",
			vs[0], vs[2], took.Round(time.Second), n, errs, hostsbench.MS(p50), hostsbench.MS(p99), hostsbench.MS(stall))
		b.Logf("naive restarts (2 rounds, leader not moved) in %s: %d writes, %d errors, p50 %.1f ms, p99 %.1f ms, longest stall %.0f ms",
			ntook.Round(time.Second), nn, nerrs, hostsbench.MS(np50), hostsbench.MS(np99), hostsbench.MS(nstall))
	}
}

// BenchmarkReplaceUpgrade: downtime of a single-member upgrade by restore
// (3.6 -> 3.7) of a database of STEWARD_BENCH_REPLACE_MB (default 1024):
// the longest gap between two successful writes of a client writing
// throughout `steward upgrade apply --strategy restore`. Baseline in the
// same run, on a second member with the same data: the method done by hand
// with etcd's tools once clients are stopped: snapshot save, stop,
// `etcdutl snapshot restore` of the target version into a new data dir,
// start the target on it, until a read succeeds.
func BenchmarkReplaceUpgrade(b *testing.B) {
	vs := harness.Versions()
	mb := envInt("STEWARD_BENCH_REPLACE_MB", 1024)
	from, to := vs[1], vs[2]
	for range b.N {
		e := harness.New(b)
		e.Up(1, from)
		cli := e.Client()
		hostsbench.Fill(b, cli, mb)
		st := e.Status()
		dbMB := st.Members[0].DBSize >> 20
		// One client writing one key after the other, each attempt bounded
		// by a second: the longest gap between two acknowledgements is the
		// downtime a client sees.
		g := workload.Start(b, cli, workload.Options{Prefix: "gap", Wrap: 1000, Value: "w", Timeout: time.Second})
		start := time.Now()
		lines := hostsbench.TimedRun(b, e, "upgrade", "apply", "--to", to, "--strategy", "restore")
		took := time.Since(start)
		// Server side: from the members' stop to every member healthy on
		// the target (clients add their reconnection back-off to this).
		down := hostsbench.LineAt(b, lines, "every member healthy on").Sub(hostsbench.LineAt(b, lines, "members; "))
		harness.Eventually(b, time.Minute, 10*time.Millisecond, "a write after the upgrade", func() error {
			if g.AckedSince(start.Add(took)) == 0 {
				return fmt.Errorf("no write acknowledged since the plan ended (%d in all)", g.Acked())
			}
			return nil
		})
		res := g.Stop()
		gap, n, errs := res.LongestGap(), len(res.Acked), len(res.Failed)
		cli.Close()
		e.MustRun("down")

		manual := manualRestoreUpgrade(b, mb, from, to)

		b.ReportMetric(float64(dbMB), "db-MB")
		b.ReportMetric(gap.Seconds(), "steward-downtime-s")
		b.ReportMetric(down.Seconds(), "steward-server-down-s")
		b.ReportMetric(manual.Seconds(), "manual-downtime-s")
		b.Logf("steward upgrade by restore %s -> %s of a %d MB database: plan took %s, downtime (longest gap between writes) %.2f s, %d writes, %d errors",
			from, to, dbMB, took.Round(time.Second), gap.Seconds(), n, errs)
		b.Logf("by hand (snapshot save, stop, etcdutl restore, start): downtime %.2f s", manual.Seconds())
	}
}

// manualRestoreUpgrade times the by-hand method on a fresh member filled
// with mb megabytes: from the moment clients stop until the target version
// serves a read.
func manualRestoreUpgrade(b *testing.B, mb int, from, to string) time.Duration {
	e := harness.New(b)
	e.Up(1, from)
	cli := e.Client()
	hostsbench.Fill(b, cli, mb)
	m := e.Spec().Members[0]
	work := b.TempDir()
	snap := filepath.Join(work, "snapshot.db")
	store := binaries.Open(e.Store)
	etcdutl, err := store.Tool(to, "etcdutl")
	if err != nil {
		b.Fatal(err)
	}
	ex, err := store.Resolve(to)
	if err != nil {
		b.Fatal(err)
	}

	start := time.Now()
	phase := func(name string) {
		b.Logf("  by hand: %s done at %.2f s", name, time.Since(start).Seconds())
	}
	saveSnapshot(b, cli, snap)
	cli.Close()
	phase("snapshot save")
	e.MustRun("member", "stop", "--force", m.Name)
	phase("graceful stop")
	newDir := filepath.Join(work, "data")
	if out, err := exec.Command(etcdutl, "snapshot", "restore", snap, "--data-dir", newDir, "--name", m.Name,
		"--initial-cluster", m.Name+"="+m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster-token", e.Spec().Token).CombinedOutput(); err != nil {
		b.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	phase("etcdutl snapshot restore")
	c, err := cluster.Open(e.Dir)
	if err != nil {
		b.Fatal(err)
	}
	cfg := c.MemberConfig(m)
	cfg.DataDir, cfg.Version = newDir, to
	flags, err := agent.EtcdFlags(cfg, catalogue.Default())
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(ex.Path, append(append([]string{}, ex.Args...), flags...)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ncli := e.Client()
	defer ncli.Close()
	harness.Eventually(b, 5*time.Minute, 10*time.Millisecond, "etcd "+to+" serving the restored data", func() error {
		ctx, cancel := context.WithTimeout(b.Context(), time.Second)
		defer cancel()
		_, err := ncli.Get(ctx, "health")
		return err
	})
	return time.Since(start)
}
