package workload

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaderWatch polls every endpoint's status and counts leadership changes:
// each raft term in which some member reported a leader, after the first
// one seen, is one change (a transfer or an election). Terms without a
// leader (failed elections) are not counted; leaderships shorter than the
// poll interval may be missed, so the count is a floor.
type LeaderWatch struct {
	// Set by WatchLeaders, read-only afterwards.
	cli  *clientv3.Client
	eps  []string
	quit chan struct{}
	done chan struct{}

	// mu guards the record: the poller writes, Mark and Since read.
	mu    sync.Mutex
	terms []LeaderTerm // terms with a leader, ascending, as first seen
}

// WatchLeaders polls the status of cli's endpoints every interval until
// the test ends (a cleanup stops it). cli should be a client used for
// nothing else: a member down makes its status call wait out a short
// timeout.
func WatchLeaders(tb testing.TB, cli *clientv3.Client, interval time.Duration) *LeaderWatch {
	w := &LeaderWatch{cli: cli, eps: cli.Endpoints(), quit: make(chan struct{}), done: make(chan struct{})}
	ctx := tb.Context()
	w.poll(ctx) // the first term, so that a Mark right away counts from it
	go w.run(ctx, interval)
	tb.Cleanup(func() {
		select {
		case <-w.quit:
		default:
			close(w.quit)
		}
		<-w.done
	})
	return w
}

func (w *LeaderWatch) run(ctx context.Context, interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		case <-t.C:
		}
		w.poll(ctx)
	}
}

// LeaderTerm is a raft term in which a member reported a leader: the
// term, the leader's member ID, and when the watch first saw it.
type LeaderTerm struct {
	Term   uint64
	Leader uint64
	Seen   time.Time
}

func (w *LeaderWatch) poll(ctx context.Context) {
	type seen struct{ term, leader uint64 }
	var got []seen
	for _, ep := range w.eps {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		r, err := w.cli.Status(c, ep)
		cancel()
		if err == nil && r.Leader != 0 {
			got = append(got, seen{r.RaftTerm, r.Leader})
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for _, s := range got {
		if n := len(w.terms); n == 0 || s.term > w.terms[n-1].Term {
			w.terms = append(w.terms, LeaderTerm{Term: s.term, Leader: s.leader, Seen: now})
		}
	}
}

// LeaderMark is a point in a LeaderWatch's record (Mark), to count the
// changes after it (Since).
type LeaderMark struct{ terms int }

// Mark returns the current point of the record.
func (w *LeaderWatch) Mark() LeaderMark {
	w.mu.Lock()
	defer w.mu.Unlock()
	return LeaderMark{terms: len(w.terms)}
}

// Since returns the leadership changes seen after m, and the raft term
// increase over them (elections, including failed ones, raise it too).
func (w *LeaderWatch) Since(m LeaderMark) (changes int, termDelta uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changes = len(w.terms) - m.terms
	if changes > 0 && m.terms > 0 {
		termDelta = w.terms[len(w.terms)-1].Term - w.terms[m.terms-1].Term
	}
	return changes, termDelta
}

// TermsSince returns the terms (leadership changes) seen after m.
func (w *LeaderWatch) TermsSince(m LeaderMark) []LeaderTerm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.terms[m.terms:])
}

// PhaseReport is the measurement of one operation run under a LinChecker
// and a LeaderWatch: how long it took, the leadership changes and term
// increase seen, and the clients' history.
type PhaseReport struct {
	Name          string
	Took          time.Duration
	LeaderChanges int
	TermDelta     uint64
	Result        *LinResult
}

// FormatReports renders reports as a table: one row per operation with its
// leadership changes, operations, failures, the longest stall, and the
// failed operations by error kind (and those a retry saved).
func FormatReports(reports []PhaseReport) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tTOOK\tLEADER CHANGES\tTERM +\tOPS\tFAILED\tLONGEST STALL\tERRORS BY KIND")
	for _, r := range reports {
		failed, retried := r.Result.Errors()
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(failed)) {
			kinds = append(kinds, fmt.Sprintf("%d × %s", failed[k], k))
		}
		for _, k := range slices.Sorted(maps.Keys(retried)) {
			kinds = append(kinds, fmt.Sprintf("retried %d × %s", retried[k], k))
		}
		if len(kinds) == 0 {
			kinds = []string{"none"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Name, r.Took.Round(100*time.Millisecond), r.LeaderChanges, r.TermDelta,
			len(r.Result.Ops), r.Result.Failed(), r.Result.LongestStall().Round(time.Millisecond), strings.Join(kinds, "; "))
	}
	tw.Flush()
	return b.String()
}
