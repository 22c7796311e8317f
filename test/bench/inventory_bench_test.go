package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/etcd-steward/steward/pkg/kstorage"
)

// configMapValue is a config-map-like value as kube-apiserver stores it:
// the protobuf envelope around size bytes of object.
func configMapValue(size int) []byte {
	var tm []byte
	tm = protowire.AppendTag(tm, 1, protowire.BytesType)
	tm = protowire.AppendString(tm, "v1")
	tm = protowire.AppendTag(tm, 2, protowire.BytesType)
	tm = protowire.AppendString(tm, "ConfigMap")
	u := []byte("k8s\x00")
	u = protowire.AppendTag(u, 1, protowire.BytesType)
	u = protowire.AppendBytes(u, tm)
	u = protowire.AppendTag(u, 2, protowire.BytesType)
	u = protowire.AppendBytes(u, bytes.Repeat([]byte{'x'}, size))
	u = protowire.AppendTag(u, 3, protowire.BytesType)
	u = protowire.AppendString(u, "")
	u = protowire.AppendTag(u, 4, protowire.BytesType)
	u = protowire.AppendString(u, "")
	return u
}

// BenchmarkInventorySnapshot: inventory speed on a snapshot of a cluster
// holding STEWARD_BENCH_INVENTORY_OBJECTS (default 100,000) config maps
// (protobuf, about 600 bytes each, in 100 namespaces), written in batched
// transactions, compacted as kube-apiserver does, then 10,000 of them
// updated and 1,000 deleted after the compaction so that the snapshot has
// history to see through. ns/op is one scan of the snapshot by pkg/kstorage; the metrics
// are objects/s and peak heap of that scan, the same for the steward
// binary (`inspect storage-versions --snapshot`, wall time and peak
// anonymous memory), and the live scan of the same cluster for comparison.
func BenchmarkInventorySnapshot(b *testing.B) {
	n := envInt("STEWARD_BENCH_INVENTORY_OBJECTS", 100_000)
	e := bigOneMember(b)
	cli := e.Client()
	ctx := b.Context()
	key := func(i int) string { return fmt.Sprintf("/registry/configmaps/ns-%03d/cm-%07d", i%100, i) }
	value := configMapValue(600)
	writeAll := func(from, to, step int, op func(i int) clientv3.Op) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, 4) // concurrent transactions
		for lo := from; lo < to; lo += 100 * step {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				var ops []clientv3.Op
				for i := lo; i < min(lo+100*step, to); i += step {
					ops = append(ops, op(i))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
	}
	start := time.Now()
	writeAll(0, n, 1, func(i int) clientv3.Op { return clientv3.OpPut(key(i), string(value)) })
	resp, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		b.Fatal(err)
	}
	// Changes since the compaction: a fixed 10,000 updates and 1,000
	// deletions, whatever the number of objects.
	bigger := configMapValue(700)
	upStep, delStep := max(n/10000, 1), max(n/1000, 1)
	writeAll(0, n, upStep, func(i int) clientv3.Op { return clientv3.OpPut(key(i), string(bigger)) })
	writeAll(delStep/2, n, delStep, func(i int) clientv3.Op { return clientv3.OpDelete(key(i)) })
	want := int64(n)
	for i := delStep / 2; i < n; i += delStep {
		want--
	}
	b.Logf("wrote %d config maps in %s", n, time.Since(start).Round(time.Millisecond))

	// The live scan, for comparison.
	inv := kstorage.NewInventory(kstorage.DefaultPrefix)
	start = time.Now()
	if _, err := kstorage.ScanLive(ctx, cli, inv, kstorage.DefaultPageSize); err != nil {
		b.Fatal(err)
	}
	liveDur := time.Since(start)
	if got := inv.Report(kstorage.Source{}).Totals.Objects; got != want {
		b.Fatalf("live scan counted %d objects, want %d", got, want)
	}

	snap := filepath.Join(b.TempDir(), "snapshot.db")
	saveSnapshot(b, cli, snap)
	cli.Close()
	e.MustRun("down")
	fi, err := os.Stat(snap)
	if err != nil {
		b.Fatal(err)
	}

	// pkg/kstorage in this process: time and peak heap of each scan.
	var peakHeap uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		base := heapBytes()
		var peak uint64
		b.StartTimer()
		stop := sampleHeap(&peak)
		inv := kstorage.NewInventory(kstorage.DefaultPrefix)
		info, err := kstorage.ScanSnapshot(ctx, snap, inv)
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if got := inv.Report(kstorage.Source{}).Totals.Objects; got != want || info.Keys != want {
			b.Fatalf("snapshot scan counted %d objects (%d keys), want %d", got, info.Keys, want)
		}
		peakHeap = max(peakHeap, peak-min(peak, base))
	}
	b.StopTimer()
	perScan := b.Elapsed() / time.Duration(b.N)

	// The steward binary, end to end.
	start = time.Now()
	cmd := exec.Command(e.Bin, "inspect", "storage-versions", "--snapshot", snap, "-o", "json", "--dir", e.Dir)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	anonPeak, maxRSS := runSampled(b, cmd, 5*time.Millisecond, "steward inspect", &errOut)
	cliDur := time.Since(start)
	var rep kstorage.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Totals.Objects != want {
		b.Fatalf("steward inspect counted %d objects, want %d: %v", rep.Totals.Objects, want, err)
	}

	objs := float64(want)
	b.ReportMetric(objs, "objects")
	b.ReportMetric(float64(fi.Size())/1e6, "snapshot-MB")
	b.ReportMetric(objs/perScan.Seconds(), "objects/s")
	b.ReportMetric(float64(peakHeap)/1e6, "peak-heap-MB")
	b.ReportMetric(objs/cliDur.Seconds(), "steward-objects/s")
	b.ReportMetric(float64(anonPeak)/1024, "steward-peak-anon-MB")
	b.ReportMetric(float64(maxRSS)/1024, "steward-peak-rss-MB")
	b.ReportMetric(objs/liveDur.Seconds(), "live-objects/s")
	b.Logf("%d objects, snapshot %.0f MB: library scan %s (%.0f objects/s, peak heap %.1f MB); steward binary %s (peak anon %d MB, max RSS %d MB); live scan %s",
		want, float64(fi.Size())/1e6, perScan.Round(time.Millisecond), objs/perScan.Seconds(), float64(peakHeap)/1e6,
		cliDur.Round(time.Millisecond), anonPeak/1024, maxRSS/1024, liveDur.Round(time.Millisecond))
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

func heapBytes() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// sampleHeap records the peak of live and not yet swept heap objects every
// millisecond until stop is called.
func sampleHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
