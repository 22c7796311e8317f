// Package workload owns the client workloads the end-to-end tests and the
// benchmarks run against a Steward cluster, and the checks of what survived
// them:
//
//   - Writer: clients writing sequential keys under a prefix, which record
//     exactly which writes etcd acknowledged (keys, revision, time) and
//     which failed and with what error. Stop returns that record (Result).
//   - RequireKeys and Missing: every acknowledged write is readable.
//   - Digest: a hash and a count over the keyspace, or a prefix, at a
//     revision: comparable between clusters (a restored cluster against its
//     source), since it covers every key's revisions as well as its value.
//
// The package starts no process and reaches etcd only through the
// clientv3.KV it is given (a *clientv3.Client from the harness, or a fake
// in unit tests).
package workload

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Options shape a Writer's load. Only Prefix is required.
type Options struct {
	// Prefix names the keys: write i puts Prefix/NNNNNNN (i in seven
	// digits), or, with KeysPerWrite > 1, Prefix/NNNNNNN/0 and so on.
	Prefix string
	// Workers write concurrently, each taking the next index in turn
	// (default 1: one client writing one key after the other).
	Workers int
	// Interval paces each worker: it starts a write at most once per
	// Interval (0: back to back, as fast as one client can).
	Interval time.Duration
	// Attempts per write before it is recorded as failed (default 1: the
	// writer moves on to the next key, leaving retries to clientv3's own).
	Attempts int
	// RetryDelay separates the attempts of one write (default 100 ms).
	RetryDelay time.Duration
	// Timeout bounds each attempt (default 5 s).
	Timeout time.Duration
	// KeysPerWrite > 1 makes each write one transaction that puts that many
	// keys (one revision for several keys).
	KeysPerWrite int
	// Value is every key's value (default "v").
	Value string
	// Wrap > 0 reuses key indexes modulo Wrap: later writes overwrite
	// earlier keys, bounding the keyspace (benchmarks that measure latency).
	// Acknowledged keys are then present, not necessarily with the value
	// of the write recorded.
	Wrap int
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.Attempts <= 0 {
		o.Attempts = 1
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.KeysPerWrite <= 0 {
		o.KeysPerWrite = 1
	}
	if o.Value == "" {
		o.Value = "v"
	}
	return o
}

// Keys returns the keys write i puts.
func (o Options) Keys(i int) []string {
	o = o.withDefaults()
	if o.Wrap > 0 {
		i %= o.Wrap
	}
	base := fmt.Sprintf("%s/%07d", o.Prefix, i)
	if o.KeysPerWrite == 1 {
		return []string{base}
	}
	keys := make([]string, o.KeysPerWrite)
	for j := range keys {
		keys[j] = fmt.Sprintf("%s/%d", base, j)
	}
	return keys
}

// Write is the record of one write.
type Write struct {
	Index    int       // its sequence number: 0, 1, ...
	Keys     []string  // the keys it put (several in one transaction with KeysPerWrite)
	Start    time.Time // when its first attempt began
	End      time.Time // when etcd acknowledged it, or its last attempt failed
	Attempts int       // attempts made
	Rev      int64     // the revision etcd acknowledged it at (0 when it failed)
	Err      error     // nil: acknowledged; else the error of its last attempt
}

// Writer runs Options.Workers goroutines writing sequential keys through
// one clientv3.KV until Stop. Its methods are safe for concurrent use.
type Writer struct {
	// Set by Start, read-only afterwards (read by the workers and Stop).
	kv      clientv3.KV
	opts    Options
	ctx     context.Context // the test's context: the workers end with it
	quit    chan struct{}   // closed by Stop (under stopOnce)
	workers sync.WaitGroup  // the worker goroutines
	started time.Time

	// next is the next write index; each worker takes one with Add.
	next atomic.Int64

	// mu guards the record below: the workers append to it, the live
	// accessors (Acked, MaxRev, AckedSince) and Stop read it.
	mu             sync.Mutex
	acked          []Write        // in acknowledgement order
	failed         []Write        // in failure order
	failedAttempts int            // every failed attempt, retried or not
	attemptErrs    map[string]int // failed attempts by error message
	maxRev         int64          // newest acknowledged revision
	lastErr        error          // the newest failed attempt's error
	lastErrAt      time.Time      // and when it failed

	// stopOnce makes Stop idempotent; result is written inside it and read
	// only after it.
	stopOnce sync.Once
	result   *Result
}

// Start starts a Writer against kv. It stops by itself when the test ends
// (its context is tb.Context(), and a cleanup calls Stop), so a test that
// fails half-way leaves no goroutine writing; call Stop to get the record.
func Start(tb testing.TB, kv clientv3.KV, opts Options) *Writer {
	tb.Helper()
	if opts.Prefix == "" {
		tb.Fatal("workload.Start: Options.Prefix is required")
	}
	w := &Writer{kv: kv, opts: opts.withDefaults(), ctx: tb.Context(), quit: make(chan struct{}),
		started: time.Now(), attemptErrs: map[string]int{}}
	for range w.opts.Workers {
		w.workers.Add(1)
		go w.run()
	}
	tb.Cleanup(func() { w.Stop() })
	return w
}

// run is one worker: it takes the next index and writes it until Stop or
// the end of the test.
func (w *Writer) run() {
	defer w.workers.Done()
	var tick *time.Ticker
	if w.opts.Interval > 0 {
		tick = time.NewTicker(w.opts.Interval)
		defer tick.Stop()
	}
	for {
		select {
		case <-w.quit:
			return
		case <-w.ctx.Done():
			return
		default:
		}
		w.write(int(w.next.Add(1) - 1))
		if tick != nil {
			select {
			case <-w.quit:
				return
			case <-w.ctx.Done():
				return
			case <-tick.C:
			}
		}
	}
}

// write makes up to Attempts attempts at write i and records the outcome.
func (w *Writer) write(i int) {
	wr := Write{Index: i, Keys: w.opts.Keys(i), Start: time.Now()}
	for {
		wr.Attempts++
		rev, err := w.attempt(wr.Keys)
		wr.End, wr.Rev, wr.Err = time.Now(), rev, err
		if err != nil {
			w.mu.Lock()
			w.failedAttempts++
			w.attemptErrs[err.Error()]++
			w.lastErr, w.lastErrAt = err, wr.End
			w.mu.Unlock()
		}
		if err == nil || wr.Attempts >= w.opts.Attempts || w.stopping() {
			break
		}
		select {
		case <-w.ctx.Done():
		case <-w.quit:
		case <-time.After(w.opts.RetryDelay):
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if wr.Err != nil {
		wr.Rev = 0
		w.failed = append(w.failed, wr)
		return
	}
	w.acked = append(w.acked, wr)
	w.maxRev = max(w.maxRev, wr.Rev)
}

// stopping: Stop was called or the test ended; a write that failed is not
// retried then (the attempt in flight is never cut short by Stop).
func (w *Writer) stopping() bool {
	select {
	case <-w.quit:
		return true
	default:
		return w.ctx.Err() != nil
	}
}

// attempt puts keys once (one Put, or one transaction for several keys)
// and returns the revision etcd acknowledged.
func (w *Writer) attempt(keys []string) (int64, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.Timeout)
	defer cancel()
	if len(keys) == 1 {
		r, err := w.kv.Put(ctx, keys[0], w.opts.Value)
		if err != nil {
			return 0, err
		}
		return r.Header.Revision, nil
	}
	ops := make([]clientv3.Op, len(keys))
	for j, k := range keys {
		ops[j] = clientv3.OpPut(k, w.opts.Value)
	}
	r, err := w.kv.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	return r.Header.Revision, nil
}

// Acked returns how many writes etcd has acknowledged so far.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// MaxRev returns the newest revision etcd has acknowledged so far (0: none).
func (w *Writer) MaxRev() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxRev
}

// AckedSince returns how many writes were acknowledged after t.
func (w *Writer) AckedSince(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wr := range w.acked {
		if wr.End.After(t) {
			n++
		}
	}
	return n
}

// AckedAbove returns a condition for harness.Eventually: nil once more
// than n writes are acknowledged; until then, how many are and the
// writer's last error.
func (w *Writer) AckedAbove(n int) func() error {
	return func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.acked) > n {
			return nil
		}
		return w.progressErr(fmt.Sprintf("%d writes acknowledged, want more than %d", len(w.acked), n))
	}
}

// RevAbove returns a condition for harness.Eventually: nil once a write is
// acknowledged at a revision above rev; until then, the newest one and the
// writer's last error.
func (w *Writer) RevAbove(rev int64) func() error {
	return func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.maxRev > rev {
			return nil
		}
		return w.progressErr(fmt.Sprintf("newest acknowledged revision %d, want above %d", w.maxRev, rev))
	}
}

// progressErr adds the last failed attempt to msg; w.mu is held.
func (w *Writer) progressErr(msg string) error {
	if w.lastErr == nil {
		return fmt.Errorf("%s; no attempt failed", msg)
	}
	return fmt.Errorf("%s; %d attempts failed, the last at %s: %w", msg, w.failedAttempts, w.lastErrAt.Format("15:04:05.000"), w.lastErr)
}

// Stop ends the writer, waits for the writes in flight (each within its
// attempts' timeouts) and returns the record. It may be called again (and
// is, by the test's cleanup): every call returns the same record.
func (w *Writer) Stop() *Result {
	w.stopOnce.Do(func() {
		close(w.quit)
		w.workers.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		r := &Result{
			Prefix:         w.opts.Prefix,
			Acked:          slices.Clone(w.acked),
			Failed:         slices.Clone(w.failed),
			FailedAttempts: w.failedAttempts,
			AttemptErrors:  maps.Clone(w.attemptErrs),
			MaxRev:         w.maxRev,
			Started:        w.started,
			Stopped:        time.Now(),
		}
		byIndex := func(a, b Write) int { return a.Index - b.Index }
		slices.SortFunc(r.Acked, byIndex)
		slices.SortFunc(r.Failed, byIndex)
		w.result = r
	})
	return w.result
}

// Result is what a Writer did, from Start to Stop.
type Result struct {
	Prefix string
	// Acked are the writes etcd acknowledged, in index order: each must
	// be readable afterwards (RequireKeys).
	Acked []Write
	// Failed are the writes whose every attempt failed, in index order,
	// each with its last error. etcd may or may not have applied them (a
	// timeout says nothing either way): nothing is asserted about them.
	Failed []Write
	// FailedAttempts counts every failed attempt, those of writes that a
	// later attempt got through included; AttemptErrors counts them by
	// error message.
	FailedAttempts int
	AttemptErrors  map[string]int
	// MaxRev is the newest revision etcd acknowledged.
	MaxRev int64
	// Started and Stopped bound the run.
	Started, Stopped time.Time
}

// Keys returns every acknowledged key.
func (r *Result) Keys() []string {
	var keys []string
	for _, wr := range r.Acked {
		keys = append(keys, wr.Keys...)
	}
	return keys
}

// Unsettled returns the keys whose final state the writer cannot know:
// those of every write with a failed attempt. A timed-out attempt may
// still be applied later (its proposal was in the leader's log when the
// client gave up), after a retry's acknowledgement or after Stop, changing
// the key's version and mod revision, or creating the key of a failed
// write. Leave them out of a digest compared across such a window
// (TakeDigest's except); RequireKeys still checks the acknowledged ones.
func (r *Result) Unsettled() []string {
	var keys []string
	for _, wr := range r.Acked {
		if wr.Attempts > 1 {
			keys = append(keys, wr.Keys...)
		}
	}
	for _, wr := range r.Failed {
		keys = append(keys, wr.Keys...)
	}
	return keys
}

// Latencies returns the time each acknowledged write took, from its first
// attempt to its acknowledgement, in ascending order.
func (r *Result) Latencies() []time.Duration {
	d := make([]time.Duration, len(r.Acked))
	for i, wr := range r.Acked {
		d[i] = wr.End.Sub(wr.Start)
	}
	slices.Sort(d)
	return d
}

// LongestGap returns the longest time without an acknowledgement while the
// writer ran: between two consecutive acknowledgements, and also from Start
// to the first and from the last to Stop when those bounds are set (a stall
// that lasted until Stop is a gap too; without the bounds it would not be
// counted). 0 when nothing bounds a gap.
func (r *Result) LongestGap() time.Duration {
	at := make([]time.Time, 0, len(r.Acked)+2)
	if !r.Started.IsZero() {
		at = append(at, r.Started)
	}
	for _, wr := range r.Acked {
		at = append(at, wr.End)
	}
	if !r.Stopped.IsZero() {
		at = append(at, r.Stopped)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	for i := 1; i < len(at); i++ {
		longest = max(longest, at[i].Sub(at[i-1]))
	}
	return longest
}

// String summarises the run for a test log.
func (r *Result) String() string {
	s := fmt.Sprintf("%s/: %d writes acknowledged (newest revision %d), %d failed after their attempts, %d failed attempts in %s",
		r.Prefix, len(r.Acked), r.MaxRev, len(r.Failed), r.FailedAttempts, r.Stopped.Sub(r.Started).Round(100*time.Millisecond))
	if len(r.AttemptErrors) > 0 {
		msgs := make([]string, 0, len(r.AttemptErrors))
		for m := range r.AttemptErrors {
			msgs = append(msgs, m)
		}
		sort.Slice(msgs, func(i, j int) bool { return r.AttemptErrors[msgs[i]] > r.AttemptErrors[msgs[j]] })
		s += "; errors:"
		for _, m := range msgs[:min(5, len(msgs))] {
			s += fmt.Sprintf(" %q x%d", m, r.AttemptErrors[m])
		}
	}
	return s
}

// Missing reads the writer's prefix and returns the acknowledged writes
// with a key that is not there (lost writes), in index order.
func Missing(ctx context.Context, kv clientv3.KV, r *Result) ([]Write, error) {
	resp, err := kv.Get(ctx, r.Prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("read %s/: %w", r.Prefix, err)
	}
	have := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	var lost []Write
	for _, wr := range r.Acked {
		for _, k := range wr.Keys {
			if !have[k] {
				lost = append(lost, wr)
				break
			}
		}
	}
	return lost, nil
}

// RequireKeys fails the test unless every write r records as acknowledged
// is readable through kv (within 30 s).
func RequireKeys(tb testing.TB, kv clientv3.KV, r *Result) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	lost, err := Missing(ctx, kv, r)
	if err != nil {
		tb.Fatal(err)
	}
	if len(lost) > 0 {
		var eg []string
		for _, wr := range lost[:min(5, len(lost))] {
			eg = append(eg, fmt.Sprintf("%v (acknowledged at revision %d, %s)", wr.Keys, wr.Rev, wr.End.Format("15:04:05.000")))
		}
		tb.Fatalf("%d of %d acknowledged writes under %s/ lost, e.g. %v", len(lost), len(r.Acked), r.Prefix, eg)
	}
}
