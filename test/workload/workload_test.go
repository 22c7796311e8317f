package workload_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

var errInjected = errors.New("injected failure")

// index returns the write index of a writer key (prefix/NNNNNNN[/j]).
func index(t *testing.T, key string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(strings.Split(key, "/")[1], "%d", &i); err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	return i
}

// checkRecord asserts what every Result must hold: acknowledged and failed
// writes together are exactly the indexes 0..n-1, each once and in order;
// an acknowledged write has a revision, no error, and is in kv with that
// mod revision; a failed one has its error and no revision.
func checkRecord(t *testing.T, f *fakeKV, r *workload.Result) {
	t.Helper()
	var all []workload.Write
	all = append(all, r.Acked...)
	all = append(all, r.Failed...)
	slices.SortFunc(all, func(a, b workload.Write) int { return a.Index - b.Index })
	for i, wr := range all {
		if wr.Index != i {
			t.Fatalf("write %d of %d has index %d: indexes must be 0..n-1, each once", i, len(all), wr.Index)
		}
	}
	if !slices.IsSortedFunc(r.Acked, func(a, b workload.Write) int { return a.Index - b.Index }) {
		t.Errorf("Acked not in index order")
	}
	var maxRev int64
	for _, wr := range r.Acked {
		if wr.Err != nil || wr.Rev <= 0 || wr.End.Before(wr.Start) || wr.Attempts < 1 {
			t.Fatalf("acknowledged write %+v: want no error, a revision, and End after Start", wr)
		}
		maxRev = max(maxRev, wr.Rev)
		for _, k := range wr.Keys {
			resp, err := f.Get(t.Context(), k)
			if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != wr.Rev {
				t.Fatalf("acknowledged key %s (revision %d) reads %v %v", k, wr.Rev, resp, err)
			}
		}
	}
	for _, wr := range r.Failed {
		if wr.Err == nil || wr.Rev != 0 {
			t.Fatalf("failed write %+v: want its error and no revision", wr)
		}
	}
	if r.MaxRev != maxRev {
		t.Errorf("MaxRev %d, newest acknowledged revision %d", r.MaxRev, maxRev)
	}
}

// TestWriterRecordsAcksAndFailures: with every fifth key refused, the
// record holds each refused write under Failed with its error, every other
// one under Acked with the revision it is stored at, and nothing twice.
func TestWriterRecordsAcksAndFailures(t *testing.T) {
	f := newFakeKV()
	f.fail = func(key string, _ int) error {
		if i := index(t, key); i%5 == 2 {
			return fmt.Errorf("write %d: %w", i, errInjected)
		}
		return nil
	}
	w := workload.Start(t, f, workload.Options{Prefix: "acks"})
	harness.Eventually(t, 10*time.Second, time.Millisecond, "200 acknowledged writes", w.AckedAbove(199))
	if err := w.AckedAbove(1 << 30)(); err == nil || !errors.Is(err, errInjected) {
		t.Errorf("progress condition not met: %v; want it to end with the last error", err)
	}
	r := w.Stop()
	checkRecord(t, f, r)
	if err := w.RevAbove(r.MaxRev - 1)(); err != nil {
		t.Errorf("RevAbove(MaxRev-1): %v", err)
	}
	if err := w.RevAbove(r.MaxRev)(); err == nil {
		t.Errorf("RevAbove(MaxRev) holds")
	}
	for _, wr := range r.Failed {
		if wr.Index%5 != 2 || !errors.Is(wr.Err, errInjected) || wr.Attempts != 1 {
			t.Fatalf("failed write %+v: only every fifth one, with the injected error, after one attempt", wr)
		}
	}
	for _, wr := range r.Acked {
		if wr.Index%5 == 2 {
			t.Fatalf("write %d acknowledged though every attempt was refused", wr.Index)
		}
	}
	if r.FailedAttempts != len(r.Failed) || len(r.Failed) == 0 {
		t.Errorf("%d failed attempts, %d failed writes: with one attempt each they must match (and not be 0)", r.FailedAttempts, len(r.Failed))
	}
	if !strings.Contains(r.String(), "injected failure") {
		t.Errorf("summary does not name the error: %s", r)
	}
	workload.RequireKeys(t, f, r)
	if again := w.Stop(); again != r {
		t.Errorf("a second Stop returned another record")
	}
}

// TestWriterRetries: a write refused twice goes through on its third
// attempt and is acknowledged once (Attempts 3); with Attempts 2 it is
// recorded failed with the error of its second attempt.
func TestWriterRetries(t *testing.T) {
	for _, attempts := range []int{3, 2} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			f := newFakeKV()
			f.fail = func(key string, attempt int) error {
				if attempt <= 2 {
					return fmt.Errorf("attempt %d: %w", attempt, errInjected)
				}
				return nil
			}
			w := workload.Start(t, f, workload.Options{Prefix: "retry", Attempts: attempts, RetryDelay: time.Millisecond})
			harness.Eventually(t, 10*time.Second, time.Millisecond, "20 writes made", func() error {
				if n := f.tried(); n < 20 {
					return fmt.Errorf("%d writes tried", n)
				}
				return nil
			})
			r := w.Stop()
			checkRecord(t, f, r)
			n := len(r.Acked) + len(r.Failed)
			switch attempts {
			case 3:
				for _, wr := range r.Acked {
					if wr.Attempts != 3 {
						t.Fatalf("write %d acknowledged after %d attempts, want 3", wr.Index, wr.Attempts)
					}
				}
				// The last write may have been cut short by Stop.
				if len(r.Failed) > 1 || len(r.Acked) == 0 {
					t.Fatalf("%d acknowledged, %d failed: want all but the last acknowledged", len(r.Acked), len(r.Failed))
				}
			case 2:
				if len(r.Acked) != 0 {
					t.Fatalf("%d writes acknowledged, though each attempt but the third is refused", len(r.Acked))
				}
				for _, wr := range r.Failed[:n-1] {
					if wr.Attempts != 2 || !strings.Contains(wr.Err.Error(), "attempt 2") {
						t.Fatalf("failed write %+v: want two attempts, the second's error", wr)
					}
				}
			}
			if r.FailedAttempts < 2*(n-1) {
				t.Errorf("%d failed attempts for %d writes refused twice each", r.FailedAttempts, n)
			}
		})
	}
}

// TestWriterWorkersAndTransactions: four workers, two keys per write: every
// index is written once, both keys of a write at one revision, and each
// write is its own revision.
func TestWriterWorkersAndTransactions(t *testing.T) {
	f := newFakeKV()
	w := workload.Start(t, f, workload.Options{Prefix: "txn", Workers: 4, KeysPerWrite: 2})
	harness.Eventually(t, 10*time.Second, time.Millisecond, "400 acknowledged writes", w.AckedAbove(399))
	r := w.Stop()
	checkRecord(t, f, r)
	revs := map[int64]int{}
	for _, wr := range r.Acked {
		if len(wr.Keys) != 2 || wr.Keys[0] != fmt.Sprintf("txn/%07d/0", wr.Index) || wr.Keys[1] != fmt.Sprintf("txn/%07d/1", wr.Index) {
			t.Fatalf("write %d put %v", wr.Index, wr.Keys)
		}
		if revs[wr.Rev]++; revs[wr.Rev] > 1 {
			t.Fatalf("two writes acknowledged at revision %d", wr.Rev)
		}
	}
	if got := len(r.Keys()); got != 2*len(r.Acked) {
		t.Errorf("Keys: %d, want %d", got, 2*len(r.Acked))
	}
}

// TestMissing: a key deleted after its acknowledgement is reported lost,
// and only that write.
func TestMissing(t *testing.T) {
	f := newFakeKV()
	w := workload.Start(t, f, workload.Options{Prefix: "lost"})
	harness.Eventually(t, 10*time.Second, time.Millisecond, "50 acknowledged writes", w.AckedAbove(49))
	r := w.Stop()
	if lost, err := workload.Missing(t.Context(), f, r); err != nil || len(lost) != 0 {
		t.Fatalf("before the deletion: lost %v, %v", lost, err)
	}
	victim := r.Acked[17]
	f.remove(victim.Keys[0])
	lost, err := workload.Missing(t.Context(), f, r)
	if err != nil || len(lost) != 1 || lost[0].Index != victim.Index {
		t.Fatalf("after deleting %s: lost %v, %v; want exactly write %d", victim.Keys[0], lost, err, victim.Index)
	}
}

// TestWriterEndsWithTheTest: a writer its test never stops is stopped when
// the test ends: no write is made afterwards.
func TestWriterEndsWithTheTest(t *testing.T) {
	f := newFakeKV()
	var w *workload.Writer
	t.Run("forgets to stop", func(t *testing.T) {
		w = workload.Start(t, f, workload.Options{Prefix: "orphan", Interval: time.Millisecond})
		harness.Eventually(t, 10*time.Second, time.Millisecond, "a write", w.AckedAbove(0))
	})
	n := f.applied()
	r := w.Stop()                     // returns the record the cleanup made
	time.Sleep(20 * time.Millisecond) // twenty intervals: a writer still running would write again
	if f.applied() != n || len(r.Acked) != n {
		t.Fatalf("%d writes when the test ended, %d recorded, %d now: the writer outlived its test", n, len(r.Acked), f.applied())
	}
}

// TestWriterWrap: with Wrap, keys are reused: the keyspace stays bounded.
func TestWriterWrap(t *testing.T) {
	f := newFakeKV()
	w := workload.Start(t, f, workload.Options{Prefix: "wrap", Wrap: 10, Value: strings.Repeat("w", 1024)})
	harness.Eventually(t, 10*time.Second, time.Millisecond, "100 acknowledged writes", w.AckedAbove(99))
	r := w.Stop()
	resp, err := f.Get(t.Context(), "wrap/", clientWithPrefix()...)
	if err != nil || resp.Count != 10 {
		t.Fatalf("%d keys under wrap/ after %d writes, want 10 (%v)", resp.Count, len(r.Acked), err)
	}
	workload.RequireKeys(t, f, r)
}

// TestUnsettled: the keys of writes with a failed attempt, acknowledged by
// a retry or failed, are unsettled; those acknowledged at once are not.
func TestUnsettled(t *testing.T) {
	r := &workload.Result{
		Acked: []workload.Write{
			{Index: 0, Keys: []string{"w/0"}, Attempts: 1},
			{Index: 1, Keys: []string{"w/1/0", "w/1/1"}, Attempts: 3},
		},
		Failed: []workload.Write{{Index: 2, Keys: []string{"w/2"}, Attempts: 20}},
	}
	if got, want := r.Unsettled(), []string{"w/1/0", "w/1/1", "w/2"}; !slices.Equal(got, want) {
		t.Fatalf("Unsettled %v, want %v", got, want)
	}
}

// TestResultTimes: Latencies and LongestGap from the record's times.
func TestResultTimes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := &workload.Result{Acked: []workload.Write{
		{Index: 0, Start: at(0), End: at(5)},
		{Index: 1, Start: at(5), End: at(7)},
		{Index: 2, Start: at(7), End: at(1007)}, // a second's stall
		{Index: 3, Start: at(1007), End: at(1010)},
	}}
	if got := r.LongestGap(); got != 1000*time.Millisecond {
		t.Errorf("LongestGap %s, want 1s", got)
	}
	want := []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond, time.Second}
	if got := r.Latencies(); !slices.Equal(got, want) {
		t.Errorf("Latencies %v, want %v", got, want)
	}
	// A stall that lasts until Stop is a gap too, and so is one before
	// the first acknowledgement.
	r.Started, r.Stopped = at(0), at(3010)
	if got := r.LongestGap(); got != 2000*time.Millisecond {
		t.Errorf("LongestGap with a stall until Stop %s, want 2s", got)
	}
	r.Started, r.Stopped = at(-4000), at(1010)
	if got := r.LongestGap(); got != 4005*time.Millisecond {
		t.Errorf("LongestGap with a stall before the first write %s, want 4.005s", got)
	}
}
