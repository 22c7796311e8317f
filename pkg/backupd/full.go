package backupd

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/metrics"
	"github.com/etcd-steward/steward/pkg/restore"
)

// fuller takes the backup leader's scheduled full snapshots for one
// round: at most one at a time, in the background beside the recorder,
// which goes on recording while a full streams or keeps failing (see the
// invariant in round).
type fuller struct {
	c      *cluster.Cluster
	log    *slog.Logger
	r      *report
	member string
	// took is called under r.mu after a full snapshot was stored; then
	// comp folds the new chain from it (rebase, outside r.mu: the
	// compactor takes its lock before r.mu).
	took func(backup.Manifest)
	comp *compactor

	wg sync.WaitGroup

	mu       sync.Mutex
	running  bool      // guarded by mu
	failures int       // consecutive failed full snapshots; guarded by mu
	retryAt  time.Time // no new attempt before; guarded by mu
}

// fullRetry is the wait before another attempt after n consecutive
// failures: a second at first, a minute at most (the deltas go on
// meanwhile, so a failing full costs restore time, not writes).
func fullRetry(n int) time.Duration {
	return min(time.Duration(n)*time.Second, time.Minute)
}

// start begins a full snapshot unless one runs or the last failure's
// backoff has not passed. It returns at once.
func (f *fuller) start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running || time.Now().Before(f.retryAt) {
		return
	}
	f.running = true
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		m, err := Now(ctx, f.c, Options{Member: f.member})
		if err != nil {
			f.mu.Lock()
			f.running = false
			if ctx.Err() != nil {
				f.mu.Unlock()
				return // the round ended: the next one starts over
			}
			f.failures++
			f.retryAt = time.Now().Add(fullRetry(f.failures))
			f.mu.Unlock()
			metrics.BackupFailed()
			f.log.Warn("full snapshot (the deltas go on)", "member", f.member, "err", err)
			f.r.update(true, func(st *backup.LoopStatus) { st.LastFullError, st.LastFullErrorAt = err.Error(), time.Now().UTC() })
			return
		}
		f.log.Info("full snapshot", "id", m.ID, "revision", m.EndRevision)
		metrics.BackupUploaded(metrics.KindFull, m.Size)
		f.r.update(true, func(st *backup.LoopStatus) {
			st.LastFull, st.LastFullError, st.LastFullErrorAt = m.CreatedAt, "", time.Time{}
			f.took(m)
		})
		f.comp.rebase(m.ID)
		if res, err := restore.Collect(ctx, f.c, false); err != nil {
			f.log.Warn("backup garbage collection", "err", err)
		} else if len(res.Deleted) > 0 {
			f.log.Info("backup garbage collection", "deleted", len(res.Deleted), "kept", len(res.Kept))
		}
		f.mu.Lock()
		f.running, f.failures, f.retryAt = false, 0, time.Time{}
		f.mu.Unlock()
	}()
}

// wait returns once no full snapshot runs.
func (f *fuller) wait() { f.wg.Wait() }
