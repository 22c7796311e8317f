package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/test/harness"
)

// writer puts unique keys until stopped, retrying each put the way an
// ordinary client would, and remembers every acknowledged key.
type writer struct {
	cli    *clientv3.Client
	mu     sync.Mutex
	acked  []string
	errors atomic.Int64
	n      atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

func startWriter(cli *clientv3.Client) *writer {
	w := &writer{cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			key := fmt.Sprintf("writer/%06d", i)
			for attempt := 0; attempt < 20; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := w.cli.Put(ctx, key, "x")
				cancel()
				if err == nil {
					w.mu.Lock()
					w.acked = append(w.acked, key)
					w.mu.Unlock()
					w.n.Add(1)
					break
				}
				w.errors.Add(1)
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) finish() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// TestScaling grows a cluster 1 -> 3 -> 5 and shrinks it 5 -> 3 -> 1 while a
// client writes throughout; every acknowledged write must be readable at
// the end, and writes must go on in every phase.
func TestScaling(t *testing.T) {
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			e.Up(1, v)
			first := e.Spec().Members[0].Name
			w := startWriter(e.Client(first))
			phase := func(name string, args ...[]string) {
				before := w.n.Load()
				for _, a := range args {
					e.MustRun(a...)
				}
				// The writer must make progress after each phase.
				harness.Eventually(t, 30*time.Second, 50*time.Millisecond, name+": writes to go on", func() bool {
					return w.n.Load() >= before+20
				})
			}
			wantSize := func(n int) {
				st := e.WaitStatus(60*time.Second, fmt.Sprintf("%d healthy members", n), func(st *cluster.Status) bool {
					return harness.Healthy(st) && len(st.Members) == n
				})
				if st.Cluster.VotingMembers != n || st.Cluster.Learners != 0 {
					t.Fatalf("want %d voting members and no learners, got %d voting, %d learners", n, st.Cluster.VotingMembers, st.Cluster.Learners)
				}
			}
			phase("1->3", []string{"member", "add", "m2"}, []string{"member", "add", "m3"})
			wantSize(3)
			phase("3->5", []string{"member", "add", "m4"}, []string{"member", "add", "m5"})
			wantSize(5)
			phase("5->3", []string{"member", "remove", "m4"}, []string{"member", "remove", "m5"})
			wantSize(3)
			phase("3->1", []string{"member", "remove", "m2"}, []string{"member", "remove", "m3"})
			wantSize(1)
			acked := w.finish()
			t.Logf("%d writes acknowledged, %d put attempts failed and were retried", len(acked), w.errors.Load())

			resp, err := e.Client().Get(context.Background(), "writer/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, kv := range resp.Kvs {
				have[string(kv.Key)] = true
			}
			for _, k := range acked {
				if !have[k] {
					t.Fatalf("acknowledged write %s is missing after scaling", k)
				}
			}
			if got := e.Spec().MemberNames(); len(got) != 1 || got[0] != first {
				t.Errorf("spec members after scaling: %v, want [%s]", got, first)
			}
		})
	}
}
