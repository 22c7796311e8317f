package backupd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/metrics"
	"github.com/etcd-steward/steward/pkg/restore"
)

// CompactOptions configure Compact.
type CompactOptions struct {
	// Backup is the full backup whose chain to fold (default: the newest
	// full backup).
	Backup string
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
	// IfDue compacts only when the chain has grown past the spec's
	// backup.compactAfter (as the backup leader does).
	IfDue bool
	// Fence, when set, is asked before the new backup is stored.
	Fence func() error
}

// CompactResult reports a compaction. Its JSON field names are stable.
type CompactResult struct {
	// Compacted is false when there was nothing to do (Reason says why).
	Compacted bool   `json:"compacted"`
	Reason    string `json:"reason,omitempty"`
	// From is the full backup whose chain was folded; Deltas and
	// DeltaBytes what the chain held.
	From       string `json:"from"`
	Deltas     int    `json:"deltas"`
	DeltaBytes int64  `json:"deltaBytes"`
	// Backup is the new full backup.
	Backup *backup.Manifest `json:"backup,omitempty"`
	// Digest is the keyspace digest of the chain, which the new backup was
	// checked to have before it was stored.
	Digest string `json:"digest,omitempty"`
	// Collected names the backups retention deleted afterwards.
	Collected []string `json:"collected,omitempty"`
}

// ErrNoDeltas: the chosen full backup has no deltas to fold.
var ErrNoDeltas = errors.New("no deltas to fold")

// Bounds returns the spec's compaction bounds (zero: never due).
func Bounds(c *cluster.Cluster) backup.CompactBounds {
	ca := c.Spec.Backup.CompactAfter
	if ca == nil {
		return backup.CompactBounds{}
	}
	return backup.CompactBounds{Deltas: ca.Deltas, Bytes: ca.Bytes}
}

// Compact folds a full backup and the deltas that continue it into a new
// full backup, from the backup store alone (the cluster may be down), then
// applies retention (nothing is deleted unless the new backup verified,
// and then only what retention would delete anyway). Only authenticated
// manifests are read.
func Compact(ctx context.Context, c *cluster.Cluster, o CompactOptions) (CompactResult, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return CompactResult{}, err
	}
	listing, err := c.Backups(ctx, store, false)
	if err != nil {
		return CompactResult{}, err
	}
	find := listing
	if o.Backup == "" || o.Backup == "latest" {
		// The newest full backup of the cluster's current timeline.
		find.Backups = backup.OnTimeline(listing.Backups, c.Lineage().TimelineID())
	}
	full, err := find.Find(o.Backup, store.String())
	if err != nil {
		return CompactResult{}, err
	}
	if full.Kind != backup.KindFull {
		return CompactResult{}, fmt.Errorf("backup %s is a delta; name a full backup (its chain is folded)", full.ID)
	}
	chain := backup.BuildChain(listing.Backups, full)
	res := CompactResult{From: full.ID, Deltas: len(chain.Deltas), DeltaBytes: backup.ChainBytes(chain)}
	if len(chain.Deltas) == 0 {
		res.Reason = fmt.Sprintf("%s: %s has no deltas after it", ErrNoDeltas, full.ID)
		return res, nil
	}
	if o.IfDue && !backup.CompactionDue(chain, Bounds(c)) {
		res.Reason = fmt.Sprintf("the chain after %s (%d deltas, %d bytes) has not reached backup.compactAfter", full.ID, res.Deltas, res.DeltaBytes)
		return res, nil
	}
	key, err := c.BackupKey(o.KeyFile)
	if err != nil {
		return res, err
	}
	auth, err := c.BackupAuthKey()
	if err != nil {
		return res, err
	}
	tmp := filepath.Join(c.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return res, err
	}
	c.Progress.Say("folding %s and %d deltas (revisions %d to %d) into a new full backup", full.ID, len(chain.Deltas), full.EndRevision+1, chain.End)
	out, err := backup.Compact(ctx, store, backup.CompactOptions{Chain: chain, Key: key, Auth: auth, TempDir: tmp, Fence: o.Fence, Compression: c.Spec.Backup.Compression})
	if err != nil {
		return res, err
	}
	res.Compacted, res.Backup, res.Digest = true, &out.Backup, out.Digest
	c.Progress.Say("stored %s: revision %d, keyspace digest %s (checked against the chain's)", out.Backup.ID, out.Backup.EndRevision, out.Digest)
	gc, err := restore.Collect(ctx, c, false)
	if err != nil {
		return res, fmt.Errorf("compacted into %s, then garbage collection failed: %w", out.Backup.ID, err)
	}
	res.Collected = gc.Deleted
	return res, nil
}

// compactor runs the backup leader's compactions for one round: at most one
// at a time, in the background beside the recorder, each folding the chain
// of the newest full backup the round knows.
type compactor struct {
	c      *cluster.Cluster
	log    *slog.Logger
	r      *report
	fence  func() error
	bounds backup.CompactBounds
	// folded takes a compaction's folded deltas off the round's chain
	// counters; it is called under r.mu, which guards them.
	folded func(deltas int, bytes int64)

	wg sync.WaitGroup

	mu       sync.Mutex
	running  bool      // guarded by mu
	full     string    // the newest full backup's ID; guarded by mu
	failures int       // consecutive failed compactions; guarded by mu
	retryAt  time.Time // no new attempt before; guarded by mu
}

// start begins a compaction unless one runs or the last failure's backoff
// has not passed. It returns at once.
func (k *compactor) start(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running || time.Now().Before(k.retryAt) {
		return
	}
	k.running = true
	full := k.full
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		res, err := Compact(ctx, k.c, CompactOptions{Backup: full, IfDue: true, Fence: k.fence})
		k.mu.Lock()
		defer k.mu.Unlock()
		k.running = false
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // the round ended: the next one starts over
			}
			k.failures++
			k.retryAt = time.Now().Add(min(time.Duration(k.failures)*30*time.Second, 10*time.Minute))
			k.log.Warn("delta compaction", "full", full, "err", err)
			k.r.update(true, func(st *backup.LoopStatus) { st.LastCompactionError = err.Error() })
		case res.Compacted:
			k.failures, k.retryAt, k.full = 0, time.Time{}, res.Backup.ID
			metrics.BackupUploaded(metrics.KindFull, res.Backup.Size)
			k.log.Info("delta compaction", "from", res.From, "deltas", res.Deltas, "id", res.Backup.ID,
				"revision", res.Backup.EndRevision, "digest", res.Digest, "collected", len(res.Collected))
			k.r.update(true, func(st *backup.LoopStatus) {
				st.LastCompaction, st.LastCompactionError = res.Backup.CreatedAt, ""
				k.folded(res.Deltas, res.DeltaBytes)
			})
		}
	}()
}

// wait returns once no compaction runs.
func (k *compactor) wait() { k.wg.Wait() }
