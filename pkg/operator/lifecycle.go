package operator

// What the operator runs for each EtcdCluster beside its reconciles, and
// how it ends (issue 29, review findings 1 and 2): the coordinator process
// of the resource's Steward directory (`steward certs renew --watch`,
// started by bootstrap.Up and certs.EnsureRenewer: it renews the
// certificates and runs the automatic recovery) and the goroutines of its
// version plans (upgrade.go).
//
// Invariants, enforced here:
//   - Every per-cluster goroutine runs under a clusterRun keyed by the
//     resource's UID, with a context derived from the operator's (never
//     context.WithoutCancel): it ends when the resource is deleted or the
//     operator stops, and whoever stops a run waits for its goroutines.
//   - A resource deleted (NotFound, or a deletion timestamp) has its run
//     stopped and its coordinator process stopped (SIGTERM, then SIGKILL)
//     and waited for. A resource of the same name with another UID first
//     stops the old one's run and coordinator, before its Steward directory
//     is moved aside (a coordinator left running names the directory by
//     path: it would act on the new resource's).
//   - At shutdown (the manager cancels the lifecycle's Start) every run is
//     stopped and waited for, and every coordinator process under the
//     state directory is stopped: a plan interrupted so is left resumable
//     (upgrade.go: markInterrupted) and the next leader resumes it.
//   - The counts in the operator's metrics are measured, not bookkept:
//     steward_operator_coordinator_processes scans /proc for the
//     coordinator processes of the state directory;
//     steward_operator_cluster_goroutines counts the goroutines that are
//     running (incremented before each starts, decremented as it returns).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/proc"
)

// clusterRun is what runs for one EtcdCluster (one UID) beside its
// reconciles.
type clusterRun struct {
	uid types.UID
	key string // NAMESPACE/NAME
	dir string // its Steward directory
	ctx context.Context
	// cancel ends ctx; it is set once and safe to call from any goroutine.
	cancel context.CancelFunc

	// reconcileMu is held by each reconcile of this resource: the work
	// queue never hands one key to two workers at once, and this makes the
	// rule the operator's own (MaxConcurrentReconciles > 1).
	reconcileMu sync.Mutex

	// gone: stopped because the resource was deleted or replaced (not
	// because the operator stops); set before cancel.
	gone atomic.Bool

	// mu guards closed; wg counts the goroutines started by Go (Add under
	// mu, so no Add races the Wait of stop).
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// lifecycle keeps the runs of every EtcdCluster.
type lifecycle struct {
	// stateDir is the operator's state directory (Config.StateDir), set
	// before the first use and never changed.
	stateDir string
	// log is where stops are reported (set before the first use).
	log logr.Logger

	// mu guards base, cancelAll, runs and down.
	mu        sync.Mutex
	base      context.Context
	cancelAll context.CancelFunc
	runs      map[types.UID]*clusterRun
	// down: the operator stops; no new run.
	down bool

	// goroutines is the number of per-cluster goroutines running (atomic).
	goroutines atomic.Int64
}

// stopWait is how long a deletion waits for a cluster's goroutines.
const stopWait = time.Minute

// ErrShuttingDown refuses a new run once the operator stops.
var ErrShuttingDown = errors.New("the operator is stopping")

func resourceKey(ec *v1alpha1.EtcdCluster) string { return ec.Namespace + "/" + ec.Name }

// run returns ec's run, made on first use. Runs of the same name with
// another UID (a resource deleted and made again) are stopped and waited
// for first, and their coordinator with them (replaced: there were some).
func (l *lifecycle) run(ctx context.Context, ec *v1alpha1.EtcdCluster) (cr *clusterRun, replaced bool, err error) {
	key := resourceKey(ec)
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		return nil, false, ErrShuttingDown
	}
	if l.base == nil {
		l.base, l.cancelAll = context.WithCancel(context.Background())
	}
	if l.runs == nil {
		l.runs = map[types.UID]*clusterRun{}
	}
	var stale []*clusterRun
	for uid, cr := range l.runs {
		if cr.key == key && uid != ec.UID {
			stale = append(stale, cr)
			delete(l.runs, uid)
		}
	}
	cr = l.runs[ec.UID]
	if cr == nil {
		cctx, cancel := context.WithCancel(l.base)
		cr = &clusterRun{uid: ec.UID, key: key, dir: StateDir(l.stateDir, ec), ctx: cctx, cancel: cancel}
		l.runs[ec.UID] = cr
	}
	l.mu.Unlock()
	for _, s := range stale {
		l.stopRun(ctx, s, "an EtcdCluster of the same name with another UID replaced it")
	}
	return cr, len(stale) > 0, nil
}

// Go runs fn in a goroutine of cr with cr's context; false (fn not run)
// once cr is stopped.
func (cr *clusterRun) Go(l *lifecycle, fn func(ctx context.Context)) bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.closed {
		return false
	}
	cr.wg.Add(1)
	l.goroutines.Add(1)
	go func() {
		defer cr.wg.Done()
		defer l.goroutines.Add(-1)
		fn(cr.ctx)
	}()
	return true
}

// stop cancels cr and waits for its goroutines (until ctx ends).
func (cr *clusterRun) stop(ctx context.Context) error {
	cr.mu.Lock()
	cr.closed = true
	cr.mu.Unlock()
	cr.cancel()
	done := make(chan struct{})
	go func() { cr.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the goroutines of %s did not end: %w", cr.key, ctx.Err())
	}
}

// stopRun stops cr and the coordinator of its directory, and logs it.
func (l *lifecycle) stopRun(ctx context.Context, cr *clusterRun, why string) {
	cr.gone.Store(true)
	// A step that does not heed its context must not hold the reconcile
	// worker for ever: it is reported, and ends by itself.
	sctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	err := cr.stop(sctx)
	pids, cerr := StopCoordinators(ctx, func(dir string) bool { return dir == cr.dir })
	l.log.Info("stopped what ran for the EtcdCluster", "cluster", cr.key, "uid", cr.uid, "why", why,
		"coordinatorsStopped", pids, "clusterGoroutines", l.goroutines.Load(), "error", errors.Join(err, cerr))
}

// stopKey stops every run of the resource NAMESPACE/NAME (whatever its
// UID) and the coordinator of its Steward directory: the resource is gone
// or being deleted.
func (l *lifecycle) stopKey(ctx context.Context, key, why string) {
	l.mu.Lock()
	var stop []*clusterRun
	for uid, cr := range l.runs {
		if cr.key == key {
			stop = append(stop, cr)
			delete(l.runs, uid)
		}
	}
	l.mu.Unlock()
	for _, cr := range stop {
		l.stopRun(ctx, cr, why)
	}
	dir := filepath.Join(l.stateDir, filepath.FromSlash(key))
	if pids, err := StopCoordinators(ctx, func(d string) bool { return d == dir }); len(pids) > 0 || err != nil {
		l.log.Info("stopped the coordinator of a deleted EtcdCluster", "cluster", key, "why", why, "pids", pids, "error", err)
	}
}

// shutdown stops every run and every coordinator process of the state
// directory, and waits for them (until ctx ends).
func (l *lifecycle) shutdown(ctx context.Context) error {
	l.mu.Lock()
	l.down = true
	runs := l.runs
	l.runs = nil
	if l.cancelAll != nil {
		l.cancelAll()
	}
	l.mu.Unlock()
	var errs []error
	for _, cr := range runs {
		errs = append(errs, cr.stop(ctx))
	}
	prefix := filepath.Clean(l.stateDir) + string(filepath.Separator)
	pids, err := StopCoordinators(ctx, func(d string) bool { return strings.HasPrefix(d, prefix) })
	errs = append(errs, err)
	l.log.Info("operator stopping: stopped every cluster's goroutines and coordinator", "clusters", len(runs),
		"coordinatorsStopped", pids, "clusterGoroutines", l.goroutines.Load())
	return errors.Join(errs...)
}

// lifecycleRunnable is added to the manager: its Start returns once the
// manager stops, after the lifecycle's shutdown.
type lifecycleRunnable struct{ l *lifecycle }

// Start blocks until ctx ends, then stops everything the operator runs
// per cluster.
func (lr lifecycleRunnable) Start(ctx context.Context) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 25*time.Second)
	defer cancel()
	return lr.l.shutdown(sctx)
}

// NeedLeaderElection: it runs with the controller, on the leader.
func (lifecycleRunnable) NeedLeaderElection() bool { return true }

// coordinatorDir is the Steward directory a coordinator process serves
// (`certs renew --watch --dir DIR`), "" when args are not one.
func coordinatorDir(args []string) string {
	renew, watch, dir := false, false, ""
	for i, a := range args {
		switch {
		case a == "renew" && i > 0 && args[i-1] == "certs":
			renew = true
		case a == "--watch":
			watch = true
		case a == "--dir" && i+1 < len(args):
			dir = args[i+1]
		case strings.HasPrefix(a, "--dir="):
			dir = strings.TrimPrefix(a, "--dir=")
		}
	}
	if !renew || !watch || dir == "" {
		return ""
	}
	return filepath.Clean(dir)
}

// Coordinators returns the live coordinator processes whose directory
// match accepts.
func Coordinators(match func(dir string) bool) []int {
	return proc.Find(func(args []string) bool {
		d := coordinatorDir(args)
		return d != "" && match(d)
	})
}

// StopCoordinators stops the coordinator processes whose directory match
// accepts (SIGTERM, SIGKILL after 15 s) and waits until they are gone. It
// returns their pids.
func StopCoordinators(ctx context.Context, match func(dir string) bool) ([]int, error) {
	pids := Coordinators(match)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	var errs []error
	for _, pid := range pids {
		if !waitGone(ctx, pid, 15*time.Second) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !waitGone(ctx, pid, 5*time.Second) {
				errs = append(errs, fmt.Errorf("coordinator process %d did not exit", pid))
			}
		}
	}
	return pids, errors.Join(errs...)
}

func waitGone(ctx context.Context, pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for proc.Alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// collectors are the lifecycle's metrics (registered by Run in
// controller-runtime's registry, served at the metrics address).
func (l *lifecycle) collectors() []prometheus.Collector {
	prefix := filepath.Clean(l.stateDir) + string(filepath.Separator)
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "steward_operator_coordinator_processes",
			Help: "Coordinator processes (certs renew --watch) running for the operator's Steward directories, counted in /proc.",
		}, func() float64 {
			return float64(len(Coordinators(func(d string) bool { return strings.HasPrefix(d, prefix) })))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "steward_operator_cluster_goroutines",
			Help: "Goroutines the operator runs per EtcdCluster beside its reconciles (version plans), running now.",
		}, func() float64 { return float64(l.goroutines.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "steward_operator_clusters",
			Help: "EtcdClusters (by UID) the operator keeps a run for.",
		}, func() float64 {
			l.mu.Lock()
			defer l.mu.Unlock()
			return float64(len(l.runs))
		}),
	}
}
