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
}

// Collect applies the spec's retention to the backup store: it keeps
// the newest full backup with its whole chain, the last N full backups and
// the hourly and daily ones, each with the deltas that continue it, and
// deletes the rest. It never leaves a delta without its full backup.
func Collect(ctx context.Context, c *cluster.Cluster, dryRun bool) (GCResult, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return GCResult{}, err
	}
	all, err := backup.List(ctx, store)
	if err != nil {
		return GCResult{}, err
	}
	r := c.Spec.Backup.Retention
	keep, del := backup.PlanRetention(all, backup.Retention{KeepLast: r.KeepLast, KeepHourly: r.KeepHourly, KeepDaily: r.KeepDaily}, time.Now())
	res := GCResult{Kept: []string{}, Deleted: []string{}, DryRun: dryRun}
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
