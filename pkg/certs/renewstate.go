package certs

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/status"
)

// recorder keeps the renewal state of one loop (status.RenewalState) and
// writes it to the directory's state file: at every heartbeat (its own
// goroutine, so a long round still shows the loop alive) and after each
// round. Writes are serialized by mu, so the file always holds the newest.
type recorder struct {
	dir string
	mu  sync.Mutex
	st  status.RenewalState // guarded by mu
	// failed is the last write error logged (guarded by mu), so a
	// lasting one logs once.
	failed string
}

func newRecorder(dir string, pid int, now time.Time) *recorder {
	return &recorder{dir: dir, st: status.RenewalState{PID: pid, StartedAt: now.UTC(), Heartbeat: now.UTC()}}
}

// update changes the state under the lock, stamps the heartbeat and writes it.
func (r *recorder) update(now time.Time, log *slog.Logger, f func(*status.RenewalState)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.st)
	r.st.Heartbeat = now.UTC()
	err := status.WriteRenewalState(r.dir, r.st)
	switch {
	case err != nil && err.Error() != r.failed:
		if log != nil {
			log.Warn("certificate renewal", "err", err)
		}
		r.failed = err.Error()
	case err == nil:
		r.failed = ""
	}
}

// heartbeat records the state now and every status.RenewalHeartbeat
// until ctx is done.
func (r *recorder) heartbeat(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(status.RenewalHeartbeat)
	defer t.Stop()
	for {
		r.update(time.Now(), log, func(*status.RenewalState) {})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round records a finished round: what it renewed, its error (the
// ones a loop waits out quietly are none) and the next renewal point.
func (r *recorder) round(now time.Time, rs []pki.Renewal, err error, next time.Time) {
	r.update(now, nil, func(st *status.RenewalState) {
		st.LastRound = now.UTC()
		if len(rs) > 0 {
			st.LastRenewal = now.UTC()
			st.LastRenewed = st.LastRenewed[:0]
			for _, x := range rs {
				n := x.Name
				if x.Host != "" {
					n = x.Host + "/" + x.Name
				}
				st.LastRenewed = append(st.LastRenewed, n)
			}
		}
		st.LastError = ""
		if err != nil {
			st.LastError = err.Error()
		}
		st.NextRenewal = next.UTC()
	})
}

// stop records that the loop stopped by request.
func (r *recorder) stop(now time.Time, log *slog.Logger) {
	r.update(now, log, func(st *status.RenewalState) { st.StoppedAt = now.UTC() })
}

// nextRenewal is the earliest renewal point of the leaves of dir's
// certificate directory that Steward renews (not the issued clients);
// zero when it cannot tell.
func nextRenewal(dir string) time.Time {
	c, err := cluster.Open(dir)
	if err != nil || c.Spec.TLS.Disabled || c.Spec.OperatorCerts() {
		return time.Time{}
	}
	names, err := HostLeaves(c)
	if err != nil {
		return time.Time{}
	}
	inv, err := pki.Inventory(c.CertDir())
	if err != nil {
		return time.Time{}
	}
	margin := c.Validity().WithDefaults().RenewBefore
	var next time.Time
	for _, i := range inv {
		if !slices.Contains(names, i.Name) || i.NotAfter.IsZero() {
			continue
		}
		if p := i.NotAfter.Add(-margin); next.IsZero() || p.Before(next) {
			next = p
		}
	}
	return next
}
