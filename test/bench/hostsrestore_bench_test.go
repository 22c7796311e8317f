package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkHostsUpgradeByRestore: three members on three hosts (network
// namespaces, one agent each, the coordinator in the root namespace)
// holding STEWARD_BENCH_HOSTS_RESTORE_MB (default 1024) MB go 3.5 -> 3.6
// with `upgrade apply --strategy restore`, against the rolling strategy on
// the same data in the same run (a second cluster filled the same way:
// the same keys and random values, written by hostsbench.FillRandom's eight
// concurrent clients; the fill's time is reported). Continuous backups are off (the plan's
// own full backup goes to the coordinator's local store, as in
// TestHostsUpgradeByRestore); the quota is 8 GiB.
//
// During each upgrade one client writes one small key after the other
// (1 s per attempt, no retries but clientv3's). Reported: the plan's total
// time; the longest gap between two acknowledged writes (what a client
// sees as downtime) and the sum of the gaps over a second (time with writes
// refused or unavailable); failed writes; bytes moved: what the hosts'
// veths carried during the plan (sent by the hosts, received by the
// hosts; a transfer between two hosts counts on both; each host's logged),
// and the plan's phases from its progress lines (planPhases): plan (the
// command's own start, up to step 1), preflight, backup (the verified full
// backup: streamed from the leader to the coordinator, read back), then
// for rolling the swaps, and for restore stop, replay (every member run on
// a private client port until a write goes through), copy-db (the
// source's database to the coordinator), build (each host's new data dir,
// one host after the other) and start (every member healthy on the
// target).
func BenchmarkHostsUpgradeByRestore(b *testing.B) {
	vs := harness.Versions()
	mb := envInt("STEWARD_BENCH_HOSTS_RESTORE_MB", 1024)
	from, to := vs[0], vs[1]
	for range b.N {
		for _, strategy := range []string{"rolling", "restore"} {
			b.Run(strategy, func(b *testing.B) {
				b.Logf("load average at the start: %s", hostsbench.Loadavg())
				r := hostsUpgradeRun(b, strategy, from, to, mb)
				b.Logf("load average at the end: %s", hostsbench.Loadavg())
				r.report(b)
			})
		}
	}
}

// hostsUpgrade is one upgrade of BenchmarkHostsUpgradeByRestore.
type hostsUpgrade struct {
	fill             time.Duration
	dbMB             float64
	took             time.Duration
	gap, unavailable time.Duration
	writes, failed   int
	sent, received   uint64 // bytes through the hosts' veths
	perHost          []string
	phases           []phase
}

// phase is a stretch of a plan, between two progress lines.
type phase struct {
	name string
	took time.Duration
}

func (r hostsUpgrade) report(b *testing.B) {
	b.ReportMetric(r.dbMB, "db-MB")
	b.ReportMetric(r.fill.Seconds(), "fill-s")
	b.ReportMetric(r.took.Seconds(), "upgrade-s")
	b.ReportMetric(r.gap.Seconds(), "longest-gap-s")
	b.ReportMetric(r.unavailable.Seconds(), "unavailable-s")
	b.ReportMetric(float64(r.failed), "failed-writes")
	b.ReportMetric(float64(r.writes), "writes")
	b.ReportMetric(float64(r.sent)/(1<<20), "hosts-sent-MiB")
	b.ReportMetric(float64(r.received)/(1<<20), "hosts-received-MiB")
	for _, p := range r.phases {
		b.ReportMetric(p.took.Seconds(), p.name+"-s")
	}
	b.Logf("%s: database %.0f MB (filled in %s, %.0f MB/s); upgrade in %s; longest gap between writes %s, gaps over 1 s %s in all; %d writes, %d failed; hosts sent %.0f MiB, received %.0f MiB",
		b.Name(), r.dbMB, r.fill.Round(100*time.Millisecond), r.dbMB/r.fill.Seconds(), r.took.Round(100*time.Millisecond),
		r.gap.Round(10*time.Millisecond), r.unavailable.Round(10*time.Millisecond), r.writes, r.failed,
		float64(r.sent)/(1<<20), float64(r.received)/(1<<20))
	for _, p := range r.phases {
		b.Logf("%s:   %s %s", b.Name(), p.name, p.took.Round(100*time.Millisecond))
	}
	for _, h := range r.perHost {
		b.Logf("%s:   %s", b.Name(), h)
	}
}

func hostsUpgradeRun(b *testing.B, strategy, from, to string, mb int) hostsUpgrade {
	hs := harness.NewHosts(b, 3)
	hs.Init(from)
	s := hs.Spec()
	s.Backup.Continuous = false
	s.Etcd.QuotaBackendBytes = 8 << 30
	if err := s.Save(filepath.Join(hs.Dir, spec.FileName)); err != nil {
		b.Fatal(err)
	}
	hs.StartAgents()
	hs.MustRun("up")
	hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)

	var r hostsUpgrade
	cli := hs.Client()
	defer cli.Close()
	start := time.Now()
	hostsbench.FillRandom(b, cli, mb)
	r.fill = time.Since(start)
	for _, m := range hs.Status().Members {
		r.dbMB = max(r.dbMB, float64(m.DBSize)/(1<<20))
	}
	want := workload.TakeDigest(b, cli, "data/", 0)

	sent0, recv0 := vethBytes(b, hs)
	hsent0, hrecv0 := map[string]uint64{}, map[string]uint64{}
	for _, h := range hs.Hosts {
		hsent0[h.Name], hrecv0[h.Name] = vethCounter(b, h.Link, "rx_bytes"), vethCounter(b, h.Link, "tx_bytes")
	}
	g := workload.Start(b, cli, workload.Options{Prefix: "gap", Wrap: 1000, Value: "w", Timeout: time.Second})
	start = time.Now()
	args := []string{"upgrade", "apply", "--to", to}
	if strategy != "rolling" {
		args = append(args, "--strategy", strategy)
	}
	lines := hostsbench.TimedRun(b, hs.Env, args...)
	r.took = time.Since(start)
	sent1, recv1 := vethBytes(b, hs)
	r.sent, r.received = sent1-sent0, recv1-recv0
	for _, h := range hs.Hosts {
		r.perHost = append(r.perHost, fmt.Sprintf("host %s sent %.0f MiB, received %.0f MiB", h.Name,
			float64(vethCounter(b, h.Link, "rx_bytes")-hsent0[h.Name])/(1<<20), float64(vethCounter(b, h.Link, "tx_bytes")-hrecv0[h.Name])/(1<<20)))
	}
	hs.WaitStatus(time.Minute, "every member healthy on "+to, func(st *status.Status) bool {
		for _, m := range st.Members {
			if m.Version != to {
				return false
			}
		}
		return harness.Healthy(st)
	})
	end := start.Add(r.took)
	harness.Eventually(b, time.Minute, 10*time.Millisecond, "a write after the upgrade", func() error {
		if g.AckedSince(end) == 0 {
			return os.ErrDeadlineExceeded
		}
		return nil
	})
	res := g.Stop()
	r.writes, r.failed, r.gap = len(res.Acked), len(res.Failed), res.LongestGap()
	r.unavailable = gapsOver(res, time.Second)
	r.phases = planPhases(lines, start, strategy)
	workload.RequireEqual(b, "the filled keyspace after the upgrade", workload.TakeDigest(b, cli, "data/", 0), want)
	hs.MustRun("down")
	return r
}

// gapsOver sums the gaps between consecutive acknowledged writes of res
// longer than d: the time the writer saw no write go through.
func gapsOver(res *workload.Result, d time.Duration) time.Duration {
	var sum time.Duration
	for i := 1; i < len(res.Acked); i++ {
		if gap := res.Acked[i].End.Sub(res.Acked[i-1].End); gap > d {
			sum += gap
		}
	}
	return sum
}

// planPhases names the stretches of an upgrade plan of strategy by the
// progress line that ends each: the first line of each kind below ends its
// phase, which starts where the previous phase ended (the first at the
// command's start: plan, status and agents' capabilities checked, up to
// step 1).
func planPhases(lines []hostsbench.TimedLine, start time.Time, strategy string) []phase {
	marks := []struct{ name, text string }{
		{"plan", "step 1/"},
		{"preflight", "step 2/"},
		{"backup", " verified"},
		{"swaps", "wait for cluster version"},
		{"finish", ""}, // to the end of the plan
	}
	if strategy == "restore" {
		marks = []struct{ name, text string }{
			{"plan", "step 1/"},
			{"preflight", "step 2/"},
			{"backup", " verified"},
			{"stop", "applying their WALs on private client ports"},
			{"replay", "until a write went through, and stopped"},
			{"copy-db", "copied the database of"},
			{"build", "every member has a new data dir"},
			{"start", "every member healthy on"},
			{"finish", ""},
		}
	}
	var out []phase
	prev, next := start, 0 // the previous mark's time, the line after it
	for _, m := range marks {
		if m.text == "" {
			if len(lines) > 0 {
				out = append(out, phase{m.name, lines[len(lines)-1].At.Sub(prev)})
			}
			break
		}
		for i := next; i < len(lines); i++ {
			if strings.Contains(lines[i].Text, m.text) {
				out = append(out, phase{m.name, lines[i].At.Sub(prev)})
				prev, next = lines[i].At, i+1
				break
			}
		}
	}
	return out
}

// vethBytes returns the bytes the hosts sent (their veths' receive
// counters in the root namespace) and received (transmit counters).
func vethBytes(b *testing.B, hs *harness.Hosts) (sent, received uint64) {
	for _, h := range hs.Hosts {
		sent += vethCounter(b, h.Link, "rx_bytes")
		received += vethCounter(b, h.Link, "tx_bytes")
	}
	return sent, received
}

// vethCounter reads a counter of a root-namespace interface.
func vethCounter(b *testing.B, link, counter string) uint64 {
	s, err := os.ReadFile(filepath.Join("/sys/class/net", link, "statistics", counter))
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(s)), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
