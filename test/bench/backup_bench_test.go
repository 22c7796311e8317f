package bench

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkFullSnapshot: `steward backup now` (stream, verify etcd's
// checksum, read the revision, consistency check, zstd, store with
// manifest) against `etcdctl snapshot save` of the same member's database,
// in one run. Reports both throughputs and their ratio.
func BenchmarkFullSnapshot(b *testing.B) {
	v := binaries.EmbeddedVersion()
	for i := 0; i < b.N; i++ {
		e := harness.New(b)
		e.WriteSpec(3, v, func(s *spec.Cluster) {
			s.Backup.Continuous = false // measure one snapshot, nothing beside it
		})
		e.MustRun("up")
		cli := e.Client()
		fillRandom(b, cli, 200)
		st := e.Status()
		leader, _ := st.Member(st.Cluster.Leader)
		mb := float64(leader.DBSize) / 1e6

		start := time.Now()
		out := e.MustRun("backup", "now", "-o", "json")
		stewardDur := time.Since(start)
		var m backup.Manifest
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			b.Fatal(err)
		}

		env := os.Environ()
		for _, line := range strings.Split(strings.TrimSpace(e.MustRun("env")), "\n") {
			if !strings.Contains(line, "ETCDCTL_ENDPOINTS") {
				env = append(env, strings.TrimPrefix(line, "export "))
			}
		}
		env = append(env, "ETCDCTL_ENDPOINTS="+leader.ClientURLs[0])
		dst := filepath.Join(e.Dir, "etcdctl.db")
		cmd := exec.Command(filepath.Join(e.Store, "etcd-v"+v, "etcdctl"), "snapshot", "save", dst)
		cmd.Env = env
		start = time.Now()
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("etcdctl snapshot save: %v\n%s", err, o)
		}
		etcdctlDur := time.Since(start)

		b.ReportMetric(mb, "db-MB")
		b.ReportMetric(mb/stewardDur.Seconds(), "steward-MB/s")
		b.ReportMetric(mb/etcdctlDur.Seconds(), "etcdctl-MB/s")
		b.ReportMetric(etcdctlDur.Seconds()/stewardDur.Seconds(), "steward/etcdctl-throughput")
		b.ReportMetric(float64(m.Size)/1e6, "stored-MB")
		b.Logf("db %.0f MB: steward %s (%.0f MB/s, stored %.1f MB), etcdctl %s (%.0f MB/s)",
			mb, stewardDur.Round(time.Millisecond), mb/stewardDur.Seconds(), float64(m.Size)/1e6,
			etcdctlDur.Round(time.Millisecond), mb/etcdctlDur.Seconds())
	}
}

// BenchmarkRecoveryPoint: with continuous backups on, a client writes 1,000
// times per second for 20 s; for each write, the lag from its
// acknowledgement to the moment the delta segment holding its revision is
// durable in the store (its manifest, written last, appears).
func BenchmarkRecoveryPoint(b *testing.B) {
	v := binaries.EmbeddedVersion()
	for i := 0; i < b.N; i++ {
		e := harness.New(b)
		e.Up(3, v)
		cli := e.Client()
		deltaDir := filepath.Join(e.Dir, "backups", "delta")

		// Watch the store: when does each manifest appear?
		type seen struct {
			end int64
			at  time.Time
		}
		var smu sync.Mutex
		var segs []seen
		known := map[string]bool{}
		stopScan := make(chan struct{})
		scanDone := make(chan struct{})
		go func() {
			defer close(scanDone)
			for {
				select {
				case <-stopScan:
					return
				default:
				}
				ents, _ := os.ReadDir(deltaDir)
				now := time.Now()
				for _, ent := range ents {
					n := ent.Name()
					if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") || known[n] {
						continue
					}
					known[n] = true
					raw, err := os.ReadFile(filepath.Join(deltaDir, n))
					if err != nil {
						continue
					}
					var m backup.Manifest
					if json.Unmarshal(raw, &m) == nil {
						smu.Lock()
						segs = append(segs, seen{m.EndRevision, now})
						smu.Unlock()
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()

		// 32 clients at 31.25 writes/s each: 1,000 writes/s in all, for 20 s.
		w := workload.Start(b, cli, workload.Options{Prefix: "rpo", Workers: 32, Interval: 32 * time.Millisecond, Wrap: 32000})
		time.Sleep(20 * time.Second) // the measurement window, not synchronisation
		res := w.Stop()
		acks, errs := res.Acked, len(res.Failed)
		if len(acks) == 0 {
			b.Fatalf("no write acknowledged: %s", res)
		}
		last := res.MaxRev
		harness.Eventually(b, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("revision %d to reach the store", last), func() error {
			smu.Lock()
			defer smu.Unlock()
			if end := maxEnd(segs, func(s seen) int64 { return s.end }); end < last {
				return fmt.Errorf("%d segments seen, the newest ends at revision %d", len(segs), end)
			}
			return nil
		})
		close(stopScan)
		<-scanDone
		sort.Slice(segs, func(i, j int) bool { return segs[i].end < segs[j].end })
		var lags []time.Duration
		for _, a := range acks {
			k := sort.Search(len(segs), func(i int) bool { return segs[i].end >= a.Rev })
			lags = append(lags, segs[k].at.Sub(a.End))
		}
		sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
		p := func(q float64) time.Duration { return lags[int(float64(len(lags)-1)*q)] }
		rate := float64(len(acks)) / 20
		b.ReportMetric(rate, "writes/s")
		b.ReportMetric(ms(p(0.5)), "rpo-p50-ms")
		b.ReportMetric(ms(p(0.99)), "rpo-p99-ms")
		b.ReportMetric(ms(lags[len(lags)-1]), "rpo-max-ms")
		b.Logf("%d writes (%.0f/s, %d errors) in %d segments: lag p50 %s p99 %s max %s",
			len(acks), rate, errs, len(segs), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	}
}

func maxEnd[T any](xs []T, f func(T) int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}

// fillRandom writes about mb megabytes of incompressible-ish values (random
// bytes in base64, like the serialized objects Kubernetes stores), 10 KB per
// value, 10 per transaction.
func fillRandom(b *testing.B, cli *clientv3.Client, mb int) {
	rnd := rand.New(rand.NewSource(1))
	raw := make([]byte, 7500)
	for t := 0; t < mb*10; t++ {
		ops := make([]clientv3.Op, 10)
		for j := range ops {
			rnd.Read(raw)
			ops[j] = clientv3.OpPut(fmt.Sprintf("random/%06d", t*10+j), base64.StdEncoding.EncodeToString(raw))
		}
		if _, err := cli.Txn(b.Context()).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
