// Package bench holds the benchmarks recorded in docs/benchmarks.md. Each
// compares Steward with a baseline measured in the same run. Run them with
// `make bench` (go test -bench . -benchtime 1x): every figure is a
// reported metric; ns/op is not meaningful here.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/maintenance"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/bench/hostsbench"
	"github.com/etcd-steward/steward/test/harness"
)

// BenchmarkUp: time from `steward up` to a healthy three-member cluster
// (TLS on, embedded etcd), against the baseline of starting the same three
// etcd processes by hand with the same flags and polling until a
// linearizable read succeeds on each.
func BenchmarkUp(b *testing.B) {
	v := binaries.EmbeddedVersion()
	for i := 0; i < b.N; i++ {
		e := harness.New(b)
		start := time.Now()
		e.Up(3, v)
		up := time.Since(start)
		e.MustRun("down", "--purge")

		base := bareEtcdUp(b, harness.Store(b), v)
		b.ReportMetric(up.Seconds(), "steward-up-s")
		b.ReportMetric(base.Seconds(), "bare-etcd-up-s")
	}
}

// bareEtcdUp starts three etcd processes directly (no agent, no checks) and
// returns the time until all three serve linearizable reads.
func bareEtcdUp(b *testing.B, store, v string) time.Duration {
	dir, err := os.MkdirTemp("", "bare-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: v, StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		b.Fatal(err)
	}
	s.BinaryStore = store
	c := &cluster.Cluster{Dir: dir, Spec: s}
	if err := c.EnsureCerts(); err != nil {
		b.Fatal(err)
	}
	ex, err := binaries.Open(store).Resolve(v)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for _, m := range s.Members {
		flags, err := agent.EtcdFlags(c.MemberConfig(m), catalogue.Default())
		if err != nil {
			b.Fatal(err)
		}
		args := append(append([]string{}, ex.Args...), flags...)
		cmd := exec.Command(ex.Path, args...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	tc, err := pki.ClientTLS(c.CertDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range s.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, TLS: tc, Logger: zap.NewNop(), DialTimeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		harness.Eventually(b, time.Minute-time.Since(start), 20*time.Millisecond, "bare etcd "+m.Name+" to serve a linearizable read", func() error {
			ctx, cancel := context.WithTimeout(b.Context(), time.Second)
			defer cancel()
			_, err := cli.Get(ctx, "health")
			return err
		})
		cli.Close()
	}
	return time.Since(start)
}

// saveSnapshot streams a snapshot over the client API into path (0600),
// like `etcdctl snapshot save`.
func saveSnapshot(b *testing.B, cli *clientv3.Client, path string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	rc, err := cli.Snapshot(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(f, rc); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLearnerAndDefrag: on a three-member cluster holding 100 MB,
//   - the time of `steward member add` (learner, catch-up, promote),
//     against adding a voting member directly (etcd MemberAdd + start) in
//     the same run;
//   - client write latency p50/p99 while idle, during Steward's rolling
//     defragmentation, and during a naive defragmentation of every member
//     at once (what `etcdctl defrag --cluster` does).
func BenchmarkLearnerAndDefrag(b *testing.B) {
	v := binaries.EmbeddedVersion()
	for i := 0; i < b.N; i++ {
		e := harness.New(b)
		e.Up(3, v)
		cli := e.Client()
		fillStart := time.Now()
		hostsbench.Fill(b, cli, 100)
		b.Logf("wrote 100 MB in %s", time.Since(fillStart).Round(time.Millisecond))

		start := time.Now()
		e.MustRun("member", "add", "learner")
		add := time.Since(start)

		base := directVotingAdd(b, e, "voter")

		// Five members now; remove the two added ones to defragment three.
		e.MustRun("member", "remove", "voter")
		e.MustRun("member", "remove", "learner")
		c, err := cluster.Open(e.Dir)
		if err != nil {
			b.Fatal(err)
		}
		// Overwrite the data once so defragmentation has pages to free.
		hostsbench.Fill(b, cli, 100)
		resp, err := cli.Get(b.Context(), "health")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Compact(b.Context(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			b.Fatal(err)
		}

		// Idle baseline.
		l := hostsbench.MeasureWrites(b, cli)
		time.Sleep(5 * time.Second) // a fixed measurement window, not synchronisation
		ip50, ip99, imax, in, ierr := hostsbench.WriteLatencies(l)

		l = hostsbench.MeasureWrites(b, cli)
		dstart := time.Now()
		if _, err := maintenance.Defrag(b.Context(), c, maintenance.DefragOptions{}); err != nil {
			b.Fatal(err)
		}
		rollingDur := time.Since(dstart)
		rp50, rp99, rmax, rn, rerr := hostsbench.WriteLatencies(l)

		// Refill and compact again so the naive run frees as much.
		hostsbench.Fill(b, cli, 100)
		resp, _ = cli.Get(b.Context(), "health")
		if _, err := cli.Compact(b.Context(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			b.Fatal(err)
		}
		l = hostsbench.MeasureWrites(b, cli)
		nstart := time.Now()
		var wg sync.WaitGroup
		for _, m := range e.Spec().Members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
				defer cancel()
				if _, err := cli.Defragment(ctx, m.ClientURL); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		naiveDur := time.Since(nstart)
		np50, np99, nmax, nn, nerr := hostsbench.WriteLatencies(l)

		b.ReportMetric(add.Seconds(), "learner-add-s")
		b.ReportMetric(base.Seconds(), "direct-voting-add-s")
		b.ReportMetric(hostsbench.MS(ip50), "idle-p50-ms")
		b.ReportMetric(hostsbench.MS(ip99), "idle-p99-ms")
		b.ReportMetric(hostsbench.MS(rp50), "rolling-defrag-p50-ms")
		b.ReportMetric(hostsbench.MS(rp99), "rolling-defrag-p99-ms")
		b.ReportMetric(hostsbench.MS(rmax), "rolling-defrag-max-ms")
		b.ReportMetric(float64(rerr), "rolling-defrag-errors")
		b.ReportMetric(rollingDur.Seconds(), "rolling-defrag-s")
		b.ReportMetric(hostsbench.MS(np50), "naive-defrag-p50-ms")
		b.ReportMetric(hostsbench.MS(np99), "naive-defrag-p99-ms")
		b.ReportMetric(hostsbench.MS(nmax), "naive-defrag-max-ms")
		b.ReportMetric(float64(nerr), "naive-defrag-errors")
		b.ReportMetric(naiveDur.Seconds(), "naive-defrag-s")
		b.Logf("idle: %d writes p50 %.2fms p99 %.2fms max %.2fms errors %d", in, hostsbench.MS(ip50), hostsbench.MS(ip99), hostsbench.MS(imax), ierr)
		b.Logf("rolling defrag (%s): %d writes p50 %.2fms p99 %.2fms max %.2fms errors %d", rollingDur.Round(time.Millisecond), rn, hostsbench.MS(rp50), hostsbench.MS(rp99), hostsbench.MS(rmax), rerr)
		b.Logf("naive defrag (%s): %d writes p50 %.2fms p99 %.2fms max %.2fms errors %d", naiveDur.Round(time.Millisecond), nn, hostsbench.MS(np50), hostsbench.MS(np99), hostsbench.MS(nmax), nerr)
	}
}

// directVotingAdd adds a voting member without the learner step: etcd's
// MemberAdd, then the agent starts it; returns the time until it serves a
// linearizable read.
func directVotingAdd(b *testing.B, e *harness.Env, name string) time.Duration {
	c, err := cluster.Open(e.Dir)
	if err != nil {
		b.Fatal(err)
	}
	free := spec.FreePort("127.0.0.1")
	cp, _ := free()
	pp, _ := free()
	m := spec.Member{Name: name, Agent: spec.LocalAgent,
		ClientURL: fmt.Sprintf("https://127.0.0.1:%d", cp), PeerURL: fmt.Sprintf("https://127.0.0.1:%d", pp),
		DataDir: filepath.Join("members", name, "data")}
	cli := e.Client()
	start := time.Now()
	var resp *clientv3.MemberAddResponse
	harness.Eventually(b, 30*time.Second, 200*time.Millisecond, "etcd to add "+name+" as a voting member", func() error {
		resp, err = cli.MemberAdd(b.Context(), []string{m.PeerURL})
		return err
	})
	var parts []string
	for _, em := range resp.Members {
		n := em.Name
		if em.ID == resp.Member.ID {
			n = name
		}
		for _, u := range em.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	m.Bootstrap = &spec.Bootstrap{InitialCluster: strings.Join(parts, ",")}
	next := c.Spec.Clone()
	next.Members = append(next.Members, m)
	if err := next.Save(c.SpecPath()); err != nil {
		b.Fatal(err)
	}
	c.Spec = next
	a, err := agentapi.NewClient(c.Spec.Agents[0].Address)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.PutMember(b.Context(), c.MemberConfig(m)); err != nil {
		b.Fatal(err)
	}
	if _, err := a.Start(b.Context(), name); err != nil {
		b.Fatal(err)
	}
	one := e.Client(name)
	harness.Eventually(b, 5*time.Minute-time.Since(start), 50*time.Millisecond, "the directly added "+name+" to serve a linearizable read", func() error {
		ctx, cancel := context.WithTimeout(b.Context(), time.Second)
		defer cancel()
		_, err := one.Get(ctx, "health")
		return err
	})
	return time.Since(start)
}

// bigOneMember starts a one-member cluster of the embedded etcd version with
// continuous backups off (nothing else runs) and an 8 GiB quota, for the
// benchmarks that fill a large database.
func bigOneMember(b *testing.B) *harness.Env {
	e := harness.New(b)
	e.WriteSpec(1, binaries.EmbeddedVersion(), func(s *spec.Cluster) {
		s.Backup.Continuous = false
		s.Etcd.QuotaBackendBytes = 8 << 30
	})
	e.MustRun("up")
	return e
}

// backedUpStopped is bigOneMember filled with mb MB of random values, one
// full backup taken (`steward backup now`), and the cluster stopped: the
// store and the full backup the restore benchmarks continue with deltas.
func backedUpStopped(b *testing.B, mb int) (*harness.Env, backup.Manifest, *backup.LocalStore) {
	e := bigOneMember(b)
	cli := e.Client()
	fillRandom(b, cli, mb)
	var full backup.Manifest
	if err := json.Unmarshal([]byte(e.MustRun("backup", "now", "-o", "json")), &full); err != nil {
		b.Fatal(err)
	}
	cli.Close()
	e.MustRun("down")
	store, err := backup.NewLocalStore(filepath.Join(e.Dir, "backups"))
	if err != nil {
		b.Fatal(err)
	}
	return e, full, store
}
