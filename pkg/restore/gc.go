package restore

import (
	"context"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// GCResult reports a garbage collection.
type GCResult struct {
	Kept    []string `json:"kept"`
	Deleted []string `json:"deleted"`
	DryRun  bool     `json:"dryRun"`
	// Ignored names the manifests not trusted (left alone), and why.
	Ignored []string `json:"ignored"`
}

// Collect applies the spec's retention to the backup store, per timeline
// (backup.PlanRetention): it keeps each timeline's newest full backup with
// its whole chain, every timeline's branch point on its parent, the last N full backups and
// the hourly and daily ones, each with the deltas that continue it, and
// deletes the rest. It never leaves a delta without its full backup. Only
// authenticated manifests are considered; it deletes nothing else.
func Collect(ctx context.Context, c *cluster.Cluster, dryRun bool) (GCResult, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return GCResult{}, err
	}
	listing, err := c.Backups(ctx, store, false)
	if err != nil {
		return GCResult{}, err
	}
	all := listing.Backups
	r := c.Spec.Backup.Retention
	// Per timeline; the current one's branch point on its parent is kept
	// even before the timeline has a backup of its own.
	keep, del := backup.PlanRetention(all, backup.Retention{KeepLast: r.KeepLast, KeepHourly: r.KeepHourly, KeepDaily: r.KeepDaily}, time.Now(), c.Lineage())
	res := GCResult{Kept: []string{}, Deleted: []string{}, DryRun: dryRun, Ignored: []string{}}
	for _, i := range listing.Ignored {
		// Never deleted: a manifest that is not trusted names nothing
		// garbage collection may touch.
		res.Ignored = append(res.Ignored, i.String())
		c.Progress.Say("ignored %s", i)
	}
	for _, m := range keep {
		res.Kept = append(res.Kept, m.ID)
	}
	for _, m := range del {
		res.Deleted = append(res.Deleted, m.ID)
	}
	if dryRun || len(del) == 0 {
		return res, nil
	}
	if err := backup.Collect(ctx, store, del); err != nil {
		return res, err
	}
	c.Progress.Say("deleted %d backups, kept %d", len(del), len(keep))
	return res, nil
}
