package backup

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Retention says which full backups to keep; every delta that continues a
// kept full backup is kept with it.
type Retention struct {
	// KeepLast keeps the newest N full backups (at least 1).
	KeepLast int `json:"keepLast"`
	// KeepHourly keeps the newest full backup of each of the last N hours.
	KeepHourly int `json:"keepHourly"`
	// KeepDaily keeps the newest full backup of each of the last N days.
	KeepDaily int `json:"keepDaily"`
}

// DefaultRetention keeps the last 3 full backups, hourly ones for a day and
// daily ones for a week.
var DefaultRetention = Retention{KeepLast: 3, KeepHourly: 24, KeepDaily: 7}

// PlanRetention decides what garbage collection deletes, per cluster and
// timeline. Invariants: the newest full backup of each timeline and its
// whole chain are always kept, and a delta is deleted only when no kept
// full backup's chain uses it, so no delta is ever left without its full
// backup. Each timeline's branch point is kept on its parent (the newest
// full backup of the parent at or before the branch revision, and the
// deltas after it up to the branch revision): what a restore of that
// timeline reads when it has no full backup of its own, or goes back
// before its start. branches names timelines no manifest names yet (the
// cluster's current one, just restored). Manifests of other clusters are
// kept as their own groups.
func PlanRetention(all []Manifest, r Retention, now time.Time, branches ...Lineage) (keep, del []Manifest) {
	if r.KeepLast < 1 {
		r.KeepLast = 1
	}
	type group struct {
		cluster  string
		timeline int64
	}
	byCluster := map[group][]Manifest{}
	for _, m := range all {
		g := group{m.ClusterID, m.TimelineID()}
		byCluster[g] = append(byCluster[g], m)
	}
	// Branch points to keep: every lineage a manifest or the caller names.
	pinned := map[string]bool{}
	for _, l := range append(lineagesOf(all), branches...) {
		if l.ParentTimeline == 0 {
			continue
		}
		for _, ms := range byCluster {
			if len(ms) == 0 || ms[0].TimelineID() != l.ParentTimeline {
				continue
			}
			for _, id := range branchPoint(ms, l.BranchRevision) {
				pinned[id] = true
			}
		}
	}
	for _, ms := range byCluster {
		var fulls []Manifest
		for _, m := range ms {
			if m.Kind == KindFull {
				fulls = append(fulls, m)
			}
		}
		if len(fulls) == 0 {
			keep = append(keep, ms...) // deltas without any full: not ours to judge
			continue
		}
		sort.Slice(fulls, func(i, j int) bool { return fulls[i].CreatedAt.After(fulls[j].CreatedAt) })
		kept := map[string]bool{}
		for i := 0; i < len(fulls) && i < r.KeepLast; i++ {
			kept[fulls[i].ID] = true
		}
		bucket := func(n int, d time.Duration, trunc func(time.Time) time.Time) {
			seen := map[time.Time]bool{}
			for _, f := range fulls {
				if now.Sub(f.CreatedAt) > time.Duration(n)*d {
					break
				}
				b := trunc(f.CreatedAt)
				if !seen[b] {
					seen[b] = true
					kept[f.ID] = true
				}
			}
		}
		bucket(r.KeepHourly, time.Hour, func(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) })
		bucket(r.KeepDaily, 24*time.Hour, func(t time.Time) time.Time {
			y, m, d := t.UTC().Date()
			return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		})
		needed := map[string]bool{}
		for _, f := range fulls {
			if !kept[f.ID] {
				continue
			}
			needed[f.ID] = true
			for _, d := range BuildChain(ms, f).Deltas {
				needed[d.ID] = true
			}
		}
		newest := fulls[0]
		for _, m := range ms {
			// Deltas newer than the newest full (a chain being written, or
			// after a gap) are never collected.
			if m.Kind == KindDelta && m.StartRevision > newest.EndRevision {
				needed[m.ID] = true
			}
			if needed[m.ID] || pinned[m.ID] {
				keep = append(keep, m)
			} else {
				del = append(del, m)
			}
		}
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].ID < keep[j].ID })
	sort.Slice(del, func(i, j int) bool { return del[i].ID < del[j].ID })
	return keep, del
}

// lineagesOf returns the distinct lineages the manifests carry.
func lineagesOf(all []Manifest) []Lineage {
	seen := map[Lineage]bool{}
	var out []Lineage
	for _, m := range all {
		if !seen[m.Lineage] {
			seen[m.Lineage] = true
			out = append(out, m.Lineage)
		}
	}
	return out
}

// branchPoint names what restoring ms's timeline at revision rev reads:
// the newest full backup at or before rev and the deltas of its chain that
// start at or before rev.
func branchPoint(ms []Manifest, rev int64) []string {
	var full *Manifest
	for i, m := range ms {
		if m.Kind == KindFull && m.EndRevision <= rev && (full == nil || m.EndRevision > full.EndRevision) {
			full = &ms[i]
		}
	}
	if full == nil {
		return nil
	}
	ids := []string{full.ID}
	for _, d := range BuildChain(ms, *full).Deltas {
		if d.StartRevision <= rev {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// Collect deletes what PlanRetention says, manifest first: a crash halfway
// leaves an object without a manifest (ignored), never a manifest without its
// object. Deltas go before the full backups they continue.
func Collect(ctx context.Context, s Store, del []Manifest) error {
	sort.SliceStable(del, func(i, j int) bool { return del[i].Kind == KindDelta && del[j].Kind == KindFull })
	for _, m := range del {
		if err := s.Delete(ctx, manifestName(m.Kind, m.ID)); err != nil {
			return fmt.Errorf("delete manifest of %s: %w", m.ID, err)
		}
		if err := s.Delete(ctx, m.Object); err != nil {
			return fmt.Errorf("delete %s: %w", m.Object, err)
		}
	}
	return nil
}
