package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// A restore's part in timelines (docs/backup.md#timelines; the formats
// and the pure logic are pkg/backup/timeline.go): it checks the target,
// reads the history (source.go: loadHistory, currentTimeline), resumes
// above the highest revision ever served (prepare), records the new
// timeline in the store (recordTimeline, before any data dir changes), in
// the spec (commit), and marks it committed in the store (markCommitted,
// after the commit). Invariant: a spec without a timeline reads the newest
// committed timeline (currentTimeline), never one whose restore stopped
// before its commit.

// checkTarget refuses a target that cannot be restored, before anything
// is read or changed.
func checkTarget(o Options) error {
	if o.ToRevision < 0 {
		return fmt.Errorf("target revision %d: %w: etcd revisions start at 1", o.ToRevision, ErrBadRevision)
	}
	if o.ToRevision > 0 && !o.ToTime.IsZero() {
		return refusal.New(ErrConflictingTargets, "refusing to restore to revision %d and to time %s at once: each chooses the point to restore; give one",
			o.ToRevision, o.ToTime.UTC().Format(time.RFC3339))
	}
	if o.Timeline < 0 {
		return refusal.New(ErrUnknownTimeline, "refusing to restore timeline %d: timelines are numbered from 1", o.Timeline)
	}
	if o.Timeline != 0 && o.Backup != "" && o.Backup != "latest" {
		return refusal.New(ErrConflictingTargets, "refusing to restore backup %s of timeline %d: a backup ID names its own timeline; give one", o.Backup, o.Timeline)
	}
	return nil
}

// fileHistory is what the backup store knows of the timelines, for a
// restore from a snapshot file or from a member's own database (recovery's
// reseed): its history and highest revision, and the store to record the
// new timeline in.
//
// Invariant: a restore never begins a timeline whose number may exist in
// the store. Numbers are taken in the store (newTimelineID: above every
// record name there, abandoned and untrusted ones too), and neither the
// spec nor anything else local knows them all: a restore that stopped
// before its commit, or another Steward directory on the same store, took
// numbers this spec never saw. A number reused would put this timeline's
// backups beside another's under one number, and a backup loop could
// continue the other's chain. So when the store cannot be read the
// restore is refused (ErrStoreUnreadable) before anything changes, rather
// than numbered from the spec alone.
func fileHistory(ctx context.Context, c *cluster.Cluster) (backup.History, int64, backup.Store, error) {
	store, err := c.BackupStore(ctx)
	if err == nil {
		var l backup.Listing
		if l, err = c.Backups(ctx, store, false); err == nil {
			var h backup.History
			if h, err = loadHistory(ctx, c, store, l.Backups); err == nil {
				return h, backup.HighestRevision(l.Backups, h), store, nil
			}
		}
	}
	return backup.History{}, 0, nil, refusal.New(ErrStoreUnreadable, "refusing to restore: the backup store's timelines cannot be read (%v), and the timeline this restore begins must be numbered above every one the store holds (a number reused would mix its backups with another timeline's); nothing was changed: make the backup store readable, then run it again", err)
}

// newTimelineID is the number of the timeline a restore begins: above
// every timeline known (hist, abandoned ones too), the spec's, and every
// history object name in store, trusted or not, since PutTimeline never
// replaces one. Every restore reads its store first (fileHistory refuses
// one it cannot read); store is nil only in tests.
func newTimelineID(ctx context.Context, c *cluster.Cluster, store backup.Store, hist backup.History) (int64, error) {
	n := max(hist.Newest(), c.Spec.TimelineID())
	if store != nil {
		taken, err := backup.TakenTimeline(ctx, store)
		if err != nil {
			return 0, fmt.Errorf("the timeline numbers taken in the backup store: %w", err)
		}
		n = max(n, taken)
	}
	return n + 1, nil
}

// dataDirRevisions is the highest revision in the spec's members' data
// dirs (those a restore replaces, and those it leaves): the writes the
// cluster served after its last backup. A data dir that cannot be read
// counts nothing (the margin covers it).
func dataDirRevisions(ctx context.Context, c *cluster.Cluster) int64 {
	var top int64
	for _, mem := range c.Spec.Members {
		f, err := c.CheckDataDir(ctx, mem)
		if err == nil && f.State == datadir.Valid {
			top = max(top, f.Revision)
		}
	}
	return top
}

// recordTimeline writes the new timeline's history object into store (nil:
// the store is unreachable, for a snapshot file: nothing is recorded) and
// keeps it in p for markCommitted. It names the cluster ID the restored
// data dirs keep (a snapshot file's restore keeps the recorded one), or
// the backup's when none is kept.
func recordTimeline(ctx context.Context, c *cluster.Cluster, store backup.Store, p *prepared, full backup.Manifest) error {
	if store == nil {
		return nil
	}
	auth, err := c.BackupAuthKey()
	if err != nil {
		return err
	}
	healCommit(ctx, c, store, auth)
	rec := backup.TimelineRecord{
		Lineage:       backup.Lineage{Timeline: p.timeline.ID, ParentTimeline: p.timeline.Parent, BranchRevision: p.timeline.BranchRevision},
		StartRevision: p.bumped, ClusterID: full.ClusterID, Source: p.from, CreatedAt: time.Now().UTC(),
	}
	if _, cid := p.ids.Hex(); cid != "" {
		rec.ClusterID = cid
	}
	if full.ID != "" {
		rec.Source = full.ID
	}
	if err := backup.PutTimeline(ctx, store, auth, &rec); err != nil {
		return err
	}
	p.record, p.store = &rec, store
	return nil
}

// markCommitted writes the new timeline's commit marker once the restore
// committed (the data dirs in place, the spec naming the timeline): only
// then can a spec that records no timeline take it as current. A failure
// is reported, not returned: the restore is done, and this spec names the
// timeline.
func markCommitted(ctx context.Context, c *cluster.Cluster, p prepared) {
	if p.record == nil {
		return
	}
	auth, err := c.BackupAuthKey()
	if err == nil {
		err = backup.PutTimelineCommit(ctx, p.store, auth, *p.record, time.Now())
	}
	if err != nil {
		c.Progress.Say("warning: the restore is complete and this spec names timeline %d, but marking it committed in the backup store failed (%v): a Steward directory without this spec takes it as current only once it has a backup", p.timeline.ID, err)
	}
}

// healCommit writes the commit marker of the spec's timeline when the
// store holds its record without one: a restore that stopped between its
// commit and its marker, or one by a Steward before markers. The spec
// names it, so its restore committed. A failure is reported, not
// returned: the restore does not depend on it.
func healCommit(ctx context.Context, c *cluster.Cluster, store backup.Store, auth *backup.AuthKey) {
	t := c.Spec.Timeline
	if t == nil || t.ID < 2 {
		return
	}
	records, _, err := backup.ListTimelines(ctx, store, auth)
	for _, r := range records {
		if r.Timeline != t.ID || r.Committed {
			continue
		}
		if err = backup.PutTimelineCommit(ctx, store, auth, r, time.Now()); err == nil {
			c.Progress.Say("marked timeline %d, the one this spec names, committed in the backup store (its marker was missing)", t.ID)
		}
	}
	if err != nil {
		c.Progress.Say("warning: marking timeline %d, the one this spec names, committed in the backup store: %v", t.ID, err)
	}
}
