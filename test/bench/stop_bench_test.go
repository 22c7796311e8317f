package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// BenchmarkMemberStop: how long `steward member stop` takes to stop each
// member of a three-member cluster in turn (leadership moved away first
// when it leads), on a quiet cluster and with a kube-apiserver connected to
// every member (its watch streams open on each), while a client writes
// throughout and another watches every write. Besides the times (the CLI,
// and the member process alone, from the request until it has exited), it
// checks what a fast stop must not cost: every acknowledged write is
// readable through the stopped member once it is back, and the watch sees
// every acknowledged write without a compaction error.
func BenchmarkMemberStop(b *testing.B) {
	vs := harness.Versions()
	v := vs[len(vs)-1]
	for range b.N {
		for _, kube := range []bool{false, true} {
			side := "client"
			if kube {
				side = "kube-apiserver"
			}
			e := harness.New(b)
			e.Up(3, v)
			if kube {
				e.StartKubeAPIServer()
			}
			r := stopEachMember(b, e)
			b.ReportMetric(r.maxProcess.Seconds(), side+"-max-stop-s")
			b.ReportMetric(r.maxCLI.Seconds(), side+"-max-cli-stop-s")
			b.ReportMetric(float64(r.lost), side+"-lost-writes")
			b.ReportMetric(float64(r.compacted), side+"-watch-compactions")
			b.Logf("%s: member stop (process exit) %v; `steward member stop` %v; %s; %d acknowledged writes lost; watch: %d events, %d compaction errors, %d other errors",
				side, r.process, r.cli, r.writes, r.lost, r.events, r.compacted, r.watchErrs)
		}
	}
}

type stopRun struct {
	process, cli       []time.Duration
	maxProcess, maxCLI time.Duration
	writes             string
	lost               int
	events             int
	compacted          int
	watchErrs          int
}

// stopEachMember stops and starts every member of e in turn.
func stopEachMember(b *testing.B, e *harness.Env) stopRun {
	var r stopRun
	cli := e.Client()
	start, err := cli.Get(b.Context(), "stop/")
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Start(b, cli, workload.Options{Prefix: "stop", Interval: 2 * time.Millisecond, Timeout: 10 * time.Second})
	watch := watchAll(b, e.Client(), "stop/", start.Header.Revision+1)
	for _, name := range e.Spec().MemberNames() {
		before := w.Acked()
		pid := e.MemberPID(name)
		t0 := time.Now()
		exited := make(chan time.Duration, 1)
		go func() {
			for syscall.Kill(pid, 0) == nil {
				time.Sleep(2 * time.Millisecond)
			}
			exited <- time.Since(t0)
		}()
		e.MustRun("member", "stop", name)
		r.cli = append(r.cli, time.Since(t0).Round(time.Millisecond))
		r.process = append(r.process, (<-exited).Round(time.Millisecond))
		harness.Eventually(b, 30*time.Second, 10*time.Millisecond, "writes to go on without "+name, w.AckedAbove(before+50))
		e.MustRun("member", "start", name)
		e.WaitStatus(time.Minute, name+" healthy", func(st *status.Status) bool { return harness.Healthy(st) })
	}
	res := w.Stop()
	r.writes = res.String()
	// Every acknowledged write through each member alone, once it has
	// caught up: a member killed before its database caught up with its
	// WAL must have replayed it.
	for _, name := range e.Spec().MemberNames() {
		one := e.Client(name)
		harness.Eventually(b, 30*time.Second, 50*time.Millisecond, name+" to catch up", func() error {
			g, err := one.Get(b.Context(), "stop/", clientv3.WithSerializable(), clientv3.WithCountOnly(), clientv3.WithPrefix())
			if err != nil {
				return err
			}
			if g.Header.Revision < res.MaxRev {
				return fmt.Errorf("at revision %d of %d", g.Header.Revision, res.MaxRev)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
		lost, err := workload.Missing(ctx, one, res)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		r.lost += len(lost)
	}
	harness.Eventually(b, 30*time.Second, 50*time.Millisecond, "the watch to see every acknowledged write", func() error {
		if n := watch.missing(res.Keys()); n > 0 {
			return fmt.Errorf("%d acknowledged writes not seen", n)
		}
		return nil
	})
	r.events, r.compacted, r.watchErrs = watch.stop()
	r.maxProcess, r.maxCLI = slices.Max(r.process), slices.Max(r.cli)
	return r
}

// watcher is one watch over a prefix, resumed by clientv3 on another
// member when its stream breaks.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch loop ends

	mu        sync.Mutex
	seen      map[string]bool // guarded by mu
	events    int             // guarded by mu
	compacted int             // guarded by mu; responses with a compaction error
	errs      int             // guarded by mu; other canceled or failed responses
}

func watchAll(b *testing.B, cli *clientv3.Client, prefix string, rev int64) *watcher {
	ctx, cancel := context.WithCancel(b.Context())
	w := &watcher{cancel: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	ch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
	go func() {
		defer close(w.done)
		for resp := range ch {
			w.mu.Lock()
			switch err := resp.Err(); {
			case resp.CompactRevision != 0:
				w.compacted++
			case err != nil && !errors.Is(err, context.Canceled):
				w.errs++
			}
			for _, ev := range resp.Events {
				w.events++
				w.seen[string(ev.Kv.Key)] = true
			}
			w.mu.Unlock()
		}
	}()
	b.Cleanup(func() { w.stop() })
	return w
}

func (w *watcher) missing(keys []string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, k := range keys {
		if !w.seen[k] {
			n++
		}
	}
	return n
}

func (w *watcher) stop() (events, compacted, errs int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, w.compacted, w.errs
}
