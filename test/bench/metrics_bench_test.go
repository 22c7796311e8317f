package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
)

// metricsPeriod is each phase of BenchmarkMetricsScrape.
const metricsPeriod = 60 * time.Second

// BenchmarkMetricsScrape: the agent's cost of serving metrics at a 5 s
// scrape interval. One three-member cluster (TLS, embedded etcd, continuous
// backups on, no client traffic) whose agent serves metrics on loopback;
// over the same period, once without any scrape (the baseline) and once
// scraped every 5 s (GET /metrics, as Prometheus does), the CPU time
// (user + system, /proc/PID/stat) the agent and its members used, the
// agent's resident memory at the end (VmRSS) and its peak (VmHWM), and
// the scrape latency.
func BenchmarkMetricsScrape(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e := harness.New(b)
		port, err := spec.FreePort("127.0.0.1")()
		if err != nil {
			b.Fatal(err)
		}
		url := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
		e.WriteSpec(3, binaries.EmbeddedVersion(), func(s *spec.Cluster) {
			s.Agents[0].MetricsAddress = "127.0.0.1:" + strconv.Itoa(port)
		})
		e.MustRun("up")
		agentPID := agentProcess(b, e.Dir)
		var members []int
		for _, n := range e.Spec().MemberNames() {
			members = append(members, e.MemberPID(n))
		}
		// The metrics server is up and the backup loop settled.
		harness.Eventually(b, 30*time.Second, 500*time.Millisecond, "metrics served", func() error {
			body, err := harness.HTTPGet(b.Context(), url)
			if err == nil && !strings.Contains(body, "steward_backup_newest_revision") {
				err = fmt.Errorf("no backup series yet")
			}
			return err
		})
		time.Sleep(5 * time.Second) // let the start settle: a measurement, not a synchronisation

		phase := func(scrape bool) (agentCPU, membersCPU float64, lat []time.Duration) {
			a0, m0 := cpuSeconds(b, agentPID), sumCPU(b, members)
			end := time.Now().Add(metricsPeriod)
			for time.Now().Before(end) {
				next := time.Now().Add(5 * time.Second)
				if scrape {
					start := time.Now()
					if _, err := harness.HTTPGet(b.Context(), url); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				time.Sleep(time.Until(next)) // the scrape interval (also without scraping: same period)
			}
			return cpuSeconds(b, agentPID) - a0, sumCPU(b, members) - m0, lat
		}
		idleCPU, idleMembers, _ := phase(false)
		idleRSS := memKB(b, agentPID, "VmRSS")
		scrapedCPU, scrapedMembers, lat := phase(true)
		scrapedRSS, peak := memKB(b, agentPID, "VmRSS"), memKB(b, agentPID, "VmHWM")
		slices.Sort(lat)
		b.ReportMetric(idleCPU, "agent-cpu-idle-s")
		b.ReportMetric(scrapedCPU, "agent-cpu-scraped-s")
		b.ReportMetric((scrapedCPU-idleCPU)/float64(len(lat))*1000, "agent-cpu-ms/scrape")
		b.ReportMetric(idleMembers, "members-cpu-idle-s")
		b.ReportMetric(scrapedMembers, "members-cpu-scraped-s")
		b.ReportMetric(idleRSS/1024, "agent-rss-idle-MB")
		b.ReportMetric(scrapedRSS/1024, "agent-rss-scraped-MB")
		b.ReportMetric(peak/1024, "agent-rss-peak-MB")
		b.ReportMetric(hostsbench.MS(lat[len(lat)/2]), "scrape-p50-ms")
		b.ReportMetric(hostsbench.MS(lat[len(lat)-1]), "scrape-max-ms")
	}
}

// agentProcess is the pid of the agent of dir.
func agentProcess(b *testing.B, dir string) int {
	b.Helper()
	pids := proc.Find(func(args []string) bool {
		return len(args) > 1 && slices.Contains(args, "agent") && strings.Contains(strings.Join(args, " "), dir)
	})
	if len(pids) != 1 {
		b.Fatalf("agent processes of %s: %v, want one", dir, pids)
	}
	return pids[0]
}

// cpuSeconds is a process's user + system CPU time.
func cpuSeconds(b *testing.B, pid int) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14, stime 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func sumCPU(b *testing.B, pids []int) float64 {
	s := 0.0
	for _, p := range pids {
		s += cpuSeconds(b, p)
	}
	return s
}

// memKB reads a field of /proc/PID/status in kB.
func memKB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
