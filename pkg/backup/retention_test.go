package backup

import (
	"fmt"
	"testing"
	"time"
)

// history builds fulls every hour for 3 days, each followed by deltas
// continuing the chain to the next full.
func history(now time.Time, hours int) []Manifest {
	var all []Manifest
	rev := int64(1)
	for h := hours; h > 0; h-- {
		at := now.Add(-time.Duration(h) * time.Hour)
		all = append(all, Manifest{ID: fmt.Sprintf("%s-full", at.Format("20060102T1504")), Kind: KindFull, ClusterID: "c", EndRevision: rev, CreatedAt: at})
		for d := 0; d < 3; d++ {
			all = append(all, Manifest{ID: fmt.Sprintf("%s-delta-%d", at.Format("20060102T1504"), d), Kind: KindDelta, ClusterID: "c",
				StartRevision: rev + 1, EndRevision: rev + 10, CreatedAt: at.Add(time.Duration(d+1) * time.Minute)})
			rev += 10
		}
	}
	return all
}

func TestPlanRetention(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 30, 0, 0, time.UTC)
	all := history(now, 72)
	keep, del := PlanRetention(all, Retention{KeepLast: 2, KeepHourly: 6, KeepDaily: 3}, now)
	if len(keep)+len(del) != len(all) {
		t.Fatalf("keep %d + delete %d != %d", len(keep), len(del), len(all))
	}
	kept := map[string]Manifest{}
	for _, m := range keep {
		kept[m.ID] = m
	}
	fulls := 0
	for _, m := range keep {
		if m.Kind == KindFull {
			fulls++
		}
	}
	// 6 hourly (covering the 2 last) + 3 daily (one of them today's, already hourly).
	if fulls < 6 || fulls > 9 {
		t.Errorf("kept %d full backups", fulls)
	}
	// Every kept full keeps its whole chain; no kept delta lacks a kept full.
	for _, m := range keep {
		if m.Kind != KindFull {
			continue
		}
		for _, d := range BuildChain(all, m).Deltas {
			if _, ok := kept[d.ID]; !ok {
				t.Fatalf("delta %s of kept full %s deleted", d.ID, m.ID)
			}
		}
	}
	for _, m := range keep {
		if m.Kind != KindDelta {
			continue
		}
		ok := false
		for _, f := range keep {
			if f.Kind == KindFull && f.EndRevision < m.StartRevision {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("delta %s kept without a full backup before it", m.ID)
		}
	}
	// The newest chain is always whole.
	newest := all[len(all)-4]
	if _, ok := kept[newest.ID]; !ok {
		t.Fatal("newest full backup deleted")
	}
	// KeepLast 0 still keeps the newest.
	keep, _ = PlanRetention(all, Retention{}, now)
	if len(keep) != 4 {
		t.Errorf("zero policy kept %d, want the newest full and its 3 deltas", len(keep))
	}
	// Another cluster's backups are untouched.
	other := append(history(now, 5), Manifest{ID: "x-full", Kind: KindFull, ClusterID: "other", EndRevision: 5, CreatedAt: now.Add(-100 * time.Hour)})
	keep, _ = PlanRetention(other, Retention{KeepLast: 1}, now)
	found := false
	for _, m := range keep {
		found = found || m.ID == "x-full"
	}
	if !found {
		t.Error("the only full backup of another cluster was deleted")
	}
}
