package bench

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkFullSnapshot: `steward backup now` (stream, verify etcd's
// checksum, read the revision, zstd or not, store with manifest, read back)
// against `etcdctl snapshot save` of the same member's database, on two
// data sets: "random" (200 MB of random base64 values) and "kube" (config
// maps written through a kube-apiserver: protobuf objects). Each round
// runs, for every backup.compression level, steward then etcdctl, back to
// back, so each pair sees the same machine load; it logs every pair's
// ratio and reports the median ratio and the stored size per level.
// STEWARD_BENCH_SNAPSHOT_ROUNDS (default 5) sets the rounds,
// STEWARD_BENCH_SNAPSHOT_LEVELS (default none,fastest,default,better) the
// levels,
// STEWARD_BENCH_SNAPSHOT_KUBE_OBJECTS (default 20000) the config maps,
// STEWARD_BENCH_SNAPSHOT_PROFILE=DIR writes a CPU profile of each
// `steward backup now` into DIR.
func BenchmarkFullSnapshot(b *testing.B) {
	b.Run("random", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e := snapshotCluster(b)
			fillRandom(b, e.Client(), 200)
			compareSnapshots(b, e)
		}
	})
	b.Run("kube", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			e := snapshotCluster(b)
			k := e.StartKubeAPIServer()
			cfg := k.RESTConfig()
			cfg.QPS, cfg.Burst = 5000, 10000
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			for ns := 0; ns < 100; ns++ {
				if _, err := cs.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%03d", ns)}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			createAppConfigMaps(b, cs, envInt("STEWARD_BENCH_SNAPSHOT_KUBE_OBJECTS", 20_000))
			k.Stop() // measure the snapshots alone, as for the random data
			compareSnapshots(b, e)
		}
	})
}

// snapshotCluster starts three members with continuous backups off, so
// nothing runs beside the snapshots measured.
func snapshotCluster(b *testing.B) *harness.Env {
	e := harness.New(b)
	e.WriteSpec(3, binaries.EmbeddedVersion(), func(s *spec.Cluster) {
		s.Backup.Continuous = false
		// compareSnapshots deletes each round's backup but the newest
		// (`backup gc`): rounds alike, not a page cache growing with tens
		// of 200 MB objects.
		s.Backup.Retention = spec.Retention{KeepLast: 1, KeepHourly: 1, KeepDaily: 1}
	})
	e.MustRun("up")
	return e
}

// compareSnapshots runs the interleaved rounds of BenchmarkFullSnapshot.
func compareSnapshots(b *testing.B, e *harness.Env) {
	st := e.Status()
	leader, _ := st.Member(st.Cluster.Leader)
	mb := float64(leader.DBSize) / 1e6
	env := os.Environ()
	for _, line := range strings.Split(strings.TrimSpace(e.MustRun("env")), "\n") {
		if !strings.Contains(line, "ETCDCTL_ENDPOINTS") {
			env = append(env, strings.TrimPrefix(line, "export "))
		}
	}
	env = append(env, "ETCDCTL_ENDPOINTS="+leader.ClientURLs[0])
	dst := filepath.Join(e.Dir, "etcdctl.db")
	levels := []string{backup.CompressionNone, backup.CompressionFastest, backup.CompressionDefault, backup.CompressionBetter}
	if l := os.Getenv("STEWARD_BENCH_SNAPSHOT_LEVELS"); l != "" {
		levels = strings.Split(l, ",")
	}
	ratios := map[string][]float64{}
	stored := map[string]float64{}
	for round := 1; round <= envInt("STEWARD_BENCH_SNAPSHOT_ROUNDS", 5); round++ {
		for _, level := range levels {
			s := e.Spec()
			s.Backup.Compression = level
			if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
				b.Fatal(err)
			}
			args := []string{"backup", "now", "-o", "json", "--dir", e.Dir}
			if dir := os.Getenv("STEWARD_BENCH_SNAPSHOT_PROFILE"); dir != "" {
				// Where steward's CPU goes (the hidden --cpu-profile).
				name := fmt.Sprintf("%s-%d-%s.pprof", strings.ReplaceAll(b.Name(), "/", "-"), round, level)
				args = append(args, "--cpu-profile", filepath.Join(dir, name))
			}
			sc := exec.Command(e.Bin, args...)
			sc.Env = append(os.Environ(), "STEWARD_DIR=")
			leaderBefore := processCPU(leader.PID)
			start := time.Now()
			out, err := sc.Output()
			stewardDur := time.Since(start)
			if err != nil {
				b.Fatalf("steward backup now: %v", err)
			}
			stewardLeader := processCPU(leader.PID) - leaderBefore
			var m backup.Manifest
			if err := json.Unmarshal(out, &m); err != nil {
				b.Fatal(err)
			}
			e.MustRun("backup", "gc")
			_ = os.Remove(dst)
			cmd := exec.Command(filepath.Join(e.Store, "etcd-v"+binaries.EmbeddedVersion(), "etcdctl"), "snapshot", "save", dst)
			cmd.Env = env
			leaderBefore = processCPU(leader.PID)
			start = time.Now()
			if o, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("etcdctl snapshot save: %v\n%s", err, o)
			}
			etcdctlDur := time.Since(start)
			etcdctlLeader := processCPU(leader.PID) - leaderBefore
			ratio := etcdctlDur.Seconds() / stewardDur.Seconds()
			ratios[level] = append(ratios[level], ratio)
			stored[level] = float64(m.Size) / 1e6
			// CPU time (user + system) of each command's process and of the
			// leader serving it: what the two cores are shared out by.
			b.Logf("round %d, %s: db %.0f MB: steward %s (%.0f MB/s, stored %.1f MB; cpu %s, leader's %s), etcdctl %s (%.0f MB/s; cpu %s, leader's %s): ratio %.2f",
				round, level, mb, stewardDur.Round(time.Millisecond), mb/stewardDur.Seconds(), stored[level],
				cpuOf(sc.ProcessState).Round(time.Millisecond), stewardLeader.Round(time.Millisecond),
				etcdctlDur.Round(time.Millisecond), mb/etcdctlDur.Seconds(),
				cpuOf(cmd.ProcessState).Round(time.Millisecond), etcdctlLeader.Round(time.Millisecond), ratio)
		}
	}
	b.ReportMetric(mb, "db-MB")
	for _, level := range levels {
		r := ratios[level]
		sort.Float64s(r)
		b.ReportMetric(r[len(r)/2], level+"-median-ratio")
		b.ReportMetric(stored[level], level+"-stored-MB")
	}
}

// cpuOf is a finished process' CPU time, user and system.
func cpuOf(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

// processCPU is a running process' CPU time so far, user and system, from
// /proc/PID/stat (0 when it cannot be read).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) start
	// after its closing parenthesis; utime and stime are the 14th and 15th
	// fields of the line, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// createAppConfigMaps creates n config maps in the 100 namespaces, 32 at
// a time, each holding about 4 KB of application configuration (keys,
// numbers, host names, repeated structure): data that compresses as real
// Kubernetes objects do, unlike random values.
func createAppConfigMaps(b *testing.B, cs kubernetes.Interface, n int) {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error // guarded by mu
	work := make(chan int, 64)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(w)))
			for i := range work {
				_, err := cs.CoreV1().ConfigMaps(fmt.Sprintf("ns-%03d", i%100)).Create(b.Context(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:        fmt.Sprintf("app-%06d-config", i),
						Labels:      map[string]string{"app.kubernetes.io/name": fmt.Sprintf("app-%d", i%300), "app.kubernetes.io/part-of": "bench", "tier": []string{"web", "api", "worker"}[i%3]},
						Annotations: map[string]string{"checksum/config": fmt.Sprintf("%016x%016x", rnd.Uint64(), rnd.Uint64())},
					},
					Data: appConfig(rnd, i),
				}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.Logf("created %d config maps in %s", n, time.Since(start).Round(time.Millisecond))
}

// appConfig is about 4 KB of configuration files for app i.
func appConfig(rnd *rand.Rand, i int) map[string]string {
	var y strings.Builder
	fmt.Fprintf(&y, "server:\n  name: app-%d\n  port: %d\n  replicas: %d\n", i, 8000+rnd.Intn(1000), 1+rnd.Intn(9))
	for j := 0; j < 40; j++ {
		fmt.Fprintf(&y, "  upstream-%02d:\n    host: svc-%d.ns-%03d.svc.cluster.local\n    timeout: %dms\n    retries: %d\n    weight: %d\n",
			j, rnd.Intn(5000), rnd.Intn(100), 100*(1+rnd.Intn(50)), rnd.Intn(5), rnd.Intn(100))
	}
	props := make([]string, 0, 30)
	for j := 0; j < 30; j++ {
		props = append(props, fmt.Sprintf("feature.flag.%d=%t", rnd.Intn(200), rnd.Intn(2) == 0))
	}
	return map[string]string{"app.yaml": y.String(), "features.properties": strings.Join(props, "\n"), "version": fmt.Sprintf("1.%d.%d", rnd.Intn(40), rnd.Intn(10))}
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
		b.ReportMetric(hostsbench.MS(p(0.5)), "rpo-p50-ms")
		b.ReportMetric(hostsbench.MS(p(0.99)), "rpo-p99-ms")
		b.ReportMetric(hostsbench.MS(lags[len(lags)-1]), "rpo-max-ms")
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
