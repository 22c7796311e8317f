package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RevisionWatch is a client of the cluster that holds one watch on a
// prefix across restores and recoveries (reconnecting, re-listing after a
// compaction error) and reads the cluster's revision beside it, and
// records anything that went backwards: an event at or below a revision
// already seen, a listing or a read below one.
type RevisionWatch struct {
	mu      sync.Mutex
	seen    map[string]int64 // key -> mod revision of its last event or listing; guarded by mu
	highest int64            // the highest revision the watch saw in an event or a listing; guarded by mu
	read    int64            // the highest revision a read saw (reads and the watch are ordered each on its own); guarded by mu
	relists int              // listings after a compaction error; guarded by mu
	bad     []string         // what went backwards; guarded by mu
	done    chan struct{}
}

// StartRevisionWatch starts the watch and the reads on prefix through
// cli; they stop when t ends.
func StartRevisionWatch(t *testing.T, cli *clientv3.Client, prefix string) *RevisionWatch {
	w := &RevisionWatch{seen: map[string]int64{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(func() { cancel(); <-w.done })
	// backoff paces the retries of a client whose cluster is down.
	backoff := func() {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { wg.Wait(); close(w.done) }()
	go func() { // the watch
		defer wg.Done()
		from := int64(0) // the last revision delivered: the watch resumes after it
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix()}
			if from > 0 {
				opts = append(opts, clientv3.WithRev(from+1))
			}
			for wr := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
				if err := wr.Err(); err != nil {
					if errors.Is(err, rpctypes.ErrCompacted) {
						// Re-list at the current revision, then watch on.
						for ctx.Err() == nil {
							rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
							resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix())
							rcancel()
							if err == nil {
								w.list(resp)
								from = resp.Header.Revision
								break
							}
							backoff()
						}
					}
					break
				}
				for _, ev := range wr.Events {
					w.event(string(ev.Kv.Key), ev.Kv.ModRevision)
					from = ev.Kv.ModRevision
				}
			}
			backoff()
		}
	}()
	go func() { // the reads
		defer wg.Done()
		for ctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			resp, err := cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			rcancel()
			if err == nil {
				w.readAt(resp.Header.Revision)
			}
			backoff()
		}
	}()
	return w
}

func (w *RevisionWatch) event(key string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev <= w.highest {
		w.bad = append(w.bad, fmt.Sprintf("event of %s at revision %d, after revision %d was seen", key, rev, w.highest))
	}
	w.highest = max(w.highest, rev)
	w.seen[key] = rev
}

func (w *RevisionWatch) list(resp *clientv3.GetResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if resp.Header.Revision < w.highest {
		w.bad = append(w.bad, fmt.Sprintf("listing at revision %d, after revision %d was seen", resp.Header.Revision, w.highest))
	}
	w.highest = max(w.highest, resp.Header.Revision)
	w.relists++
	w.seen = map[string]int64{}
	for _, kv := range resp.Kvs {
		w.seen[string(kv.Key)] = kv.ModRevision
	}
}

func (w *RevisionWatch) readAt(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev < w.read {
		w.bad = append(w.bad, fmt.Sprintf("read at revision %d, after a read at revision %d", rev, w.read))
	}
	w.read = max(w.read, rev)
}

// Seen reports whether the watch delivered (or listed) key.
func (w *RevisionWatch) Seen(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.seen[key]
	return ok
}

// WaitSeen polls until the watch delivered (or listed) key.
func (w *RevisionWatch) WaitSeen(t *testing.T, key string) {
	t.Helper()
	Eventually(t, 60*time.Second, 50*time.Millisecond, "the watch to see "+key, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.seen[key]; !ok {
			return fmt.Errorf("not seen; the highest revision seen is %d, %d re-lists, went backwards: %v", w.highest, w.relists, w.bad)
		}
		return nil
	})
}

// WaitRead polls until a read saw revision rev or later, or something
// went backwards (Check then says what).
func (w *RevisionWatch) WaitRead(t *testing.T, rev int64) {
	t.Helper()
	Eventually(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("a read at or after revision %d", rev), func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.read < rev && len(w.bad) == 0 {
			return fmt.Errorf("reads reached revision %d", w.read)
		}
		return nil
	})
}

// Relists is how many listings the watch made after a compaction error.
func (w *RevisionWatch) Relists() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.relists
}

// Check fails t when the watch or the reads saw a revision go backwards
// or twice.
func (w *RevisionWatch) Check(t *testing.T, when string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) > 0 {
		t.Fatalf("%s: a client saw revisions go backwards or twice: %s", when, strings.Join(w.bad, "; "))
	}
}
