package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/pki"
)

// learnerErr is what etcd answers a learner's clients for every request
// but Status and serializable reads.
const learnerErr = "rpc not supported for learner"

// UserLoad is what a user's plain clientv3 client does: puts and
// linearizable gets (gets only without writes), spread by clientv3's round
// robin over every endpoint it was given. It counts every error by
// message.
type UserLoad struct {
	stop chan struct{}  // closed by Stop
	wg   sync.WaitGroup // the workers

	mu   sync.Mutex
	ok   int            // guarded by mu; requests that succeeded
	errs map[string]int // guarded by mu; failed requests by error message
}

func startUserLoad(t *testing.T, cli *clientv3.Client, workers int, writes bool) *UserLoad {
	l := &UserLoad{stop: make(chan struct{}), errs: map[string]int{}}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-t.Context().Done():
					return
				default:
				}
				key := fmt.Sprintf("user/%d", w)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				var err error
				if writes && i%2 == 0 {
					_, err = cli.Put(ctx, key, fmt.Sprint(i))
				} else {
					_, err = cli.Get(ctx, key) // linearizable: the default
				}
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs[err.Error()]++
				} else {
					l.ok++
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for its workers (idempotent; called from
// the test's goroutine only).
func (l *UserLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// Result returns the requests that succeeded and the failed ones by error.
func (l *UserLoad) Result() (int, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := map[string]int{}
	for k, v := range l.errs {
		errs[k] = v
	}
	return l.ok, errs
}

// userClient is a plain clientv3 client over endpoints, as a user makes one.
func userClient(t *testing.T, e *Env, endpoints []string) *clientv3.Client {
	t.Helper()
	s := e.Spec()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if !s.TLS.Disabled {
		tc, err := pki.ClientTLS(s.CertDir(e.Dir))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// StartLearnerWatch starts what TestLearnerNeverOnClientURL (test/e2e/core)
// runs against a cluster: a user's long-lived client over endpoints (8
// workers; puts under user/ when writes) and a fresh client per request on
// each of them (gets). Stop both before RequireNoLearnerErrors reads them.
func StartLearnerWatch(t *testing.T, e *Env, endpoints []string, writes bool) (long, fresh *UserLoad) {
	return startUserLoad(t, userClient(t, e, endpoints), 8, writes), startFreshProbes(t, e, endpoints)
}

// RequireNoLearnerErrors fails t when a request of the long-lived client
// or of the fresh ones met "rpc not supported for learner" during what,
// or when none of them succeeded (a load that never reached a member
// proves nothing).
func RequireNoLearnerErrors(t *testing.T, what string, long, fresh *UserLoad) {
	t.Helper()
	for _, l := range []struct {
		what string
		l    *UserLoad
	}{{"a long-lived client over every URL", long}, {"a fresh client per request on each URL", fresh}} {
		ok, errs := l.l.Result()
		t.Logf("%s: %d requests succeeded; errors: %v", l.what, ok, errs)
		learner := 0
		for msg, n := range errs {
			if strings.Contains(msg, learnerErr) {
				learner += n
			}
		}
		if learner > 0 {
			t.Errorf("%s: %d requests failed with %q during %s", l.what, learner, learnerErr, what)
		}
		if ok == 0 {
			t.Errorf("%s: no request succeeded during %s", l.what, what)
		}
	}
}

// startFreshProbes makes, every 20 ms and for each endpoint, a new client
// of that endpoint alone and a linearizable get through it.
func startFreshProbes(t *testing.T, e *Env, endpoints []string) *UserLoad {
	s := e.Spec()
	l := &UserLoad{stop: make(chan struct{}), errs: map[string]int{}}
	for _, ep := range endpoints {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-t.Context().Done():
					return
				case <-tick.C:
				}
				cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()}
				if !s.TLS.Disabled {
					tc, err := pki.ClientTLS(s.CertDir(e.Dir))
					if err != nil {
						panic(err)
					}
					cfg.TLS = tc
				}
				cli, err := clientv3.New(cfg)
				if err == nil {
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					_, err = cli.Get(ctx, "user/probe")
					cancel()
					cli.Close()
				}
				l.mu.Lock()
				if err != nil {
					l.errs[err.Error()]++
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}
