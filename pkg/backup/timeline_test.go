package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var tlNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// man is a trusted manifest of a test history (MAC set: authenticated).
func man(kind string, l Lineage, start, end int64, at time.Duration) Manifest {
	m := Manifest{Kind: kind, ClusterID: "c", StartRevision: start, EndRevision: end, CreatedAt: tlNow.Add(at), Lineage: l, MAC: "x"}
	if kind == KindFull {
		m.ID = NewID(KindFull, m.CreatedAt, end)
	} else {
		m.ID = fmt.Sprintf("%s-delta-r%d-%d", m.CreatedAt.Format("20060102T150405.000Z"), start, end)
	}
	return m
}

// branched is this history (revisions in thousands of millions shortened):
//
//	timeline 1: full 10, deltas 11-50, full 50, deltas 51-100
//	timeline 2 (off 1 at 100, starts at 1e9+100): full, deltas to 1e9+120
//	timeline 3 (off 1 at 30, starts at 2e9+120): no backup yet (a record,
//	committed)
//	timeline 4 (off 2 at 1e9+110, starts at 3e9+120): a record whose
//	restore stopped before its commit (abandoned)
func branched() ([]Manifest, History) {
	t1, t2 := Lineage{}, Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 100}
	all := []Manifest{
		man(KindFull, t1, 1, 10, -5*time.Hour),
		man(KindDelta, t1, 11, 30, -4*time.Hour),
		man(KindDelta, t1, 31, 50, -4*time.Hour+time.Minute),
		man(KindFull, t1, 1, 50, -3*time.Hour),
		man(KindDelta, t1, 51, 100, -3*time.Hour+time.Minute),
		man(KindFull, t2, 1, 1_000_000_101, -2*time.Hour),
		man(KindDelta, t2, 1_000_000_102, 1_000_000_120, -2*time.Hour+time.Minute),
	}
	rec := TimelineRecord{Lineage: Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 30}, StartRevision: 2_000_000_120, Committed: true}
	ab := TimelineRecord{Lineage: Lineage{Timeline: 4, ParentTimeline: 2, BranchRevision: 1_000_000_110}, StartRevision: 3_000_000_120}
	return all, BuildHistory(all, []TimelineRecord{{Lineage: t2, StartRevision: 1_000_000_100}, rec, ab})
}

// TestResolve: where a restore of a timeline reads from, across branches.
func TestResolve(t *testing.T) {
	all, h := branched()
	for _, tc := range []struct {
		name     string
		timeline int64
		rev      int64
		at       time.Time
		want     Target
		err      string
	}{
		{"timeline 1, newest", 1, 0, time.Time{}, Target{Timeline: 1}, ""},
		{"timeline 2, newest", 2, 0, time.Time{}, Target{Timeline: 2}, ""},
		{"timeline 2 in its own range", 2, 1_000_000_110, time.Time{}, Target{Timeline: 2, ToRevision: 1_000_000_110}, ""},
		{"timeline 2 before its branch: its parent", 2, 60, time.Time{}, Target{Timeline: 1, ToRevision: 60, Via: 2}, ""},
		{"timeline 2 at its branch revision", 2, 100, time.Time{}, Target{Timeline: 1, ToRevision: 100, Via: 2}, ""},
		{"timeline 2 between branch and start: never served", 2, 500, time.Time{}, Target{}, "revision 500 is not on timeline 2"},
		{"timeline 3 without a backup: its branch point", 3, 0, time.Time{}, Target{Timeline: 1, ToRevision: 30, Via: 3}, ""},
		{"timeline 3 early", 3, 12, time.Time{}, Target{Timeline: 1, ToRevision: 12, Via: 3}, ""},
		{"timeline 2 by time before its first full", 2, 0, tlNow.Add(-150 * time.Minute), Target{Timeline: 1, ToRevision: 100, ToTime: tlNow.Add(-150 * time.Minute), Via: 2}, ""},
		{"unknown timeline", 9, 0, time.Time{}, Target{}, "unknown timeline 9: the store knows timelines 1, 2, 3, 4"},
		{"abandoned timeline", 4, 0, time.Time{}, Target{}, "abandoned timeline 4: the restore that began it stopped before its commit, and it has no backup of its own (it would restore timeline 2 at revision 1000000110)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(all, h, tc.timeline, tc.rev, tc.at)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Resolve: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := Resolve(all, h, 9, 0, time.Time{}); !errors.Is(err, ErrUnknownTimeline) {
		t.Errorf("unknown timeline: %v, want ErrUnknownTimeline", err)
	}
	if _, err := Resolve(all, h, 4, 0, time.Time{}); !errors.Is(err, ErrAbandonedTimeline) {
		t.Errorf("abandoned timeline: %v, want ErrAbandonedTimeline", err)
	}
	// The newest committed timeline is 3; 4 is left out.
	if n, ab := h.Latest(); n != 3 || len(ab) != 1 || ab[0] != 4 {
		t.Errorf("Latest = %d, %v; want 3, [4]", n, ab)
	}
	// An abandoned timeline with a backup of its own (the loop tagged
	// it: the spec named it) counts as committed.
	on4 := man(KindFull, Lineage{Timeline: 4, ParentTimeline: 2, BranchRevision: 1_000_000_110}, 1, 3_000_000_130, -time.Hour)
	h4 := BuildHistory(append(all, on4), []TimelineRecord{h[2], h[3], h[4]})
	if n, ab := h4.Latest(); n != 4 || len(ab) != 0 {
		t.Errorf("Latest with a backup on timeline 4 = %d, %v; want 4", n, ab)
	}
	// Parents in a cycle (never written by Steward: a record's parent is
	// older) end in an error, not a loop.
	cyc := History{1: {}, 2: {Lineage: Lineage{Timeline: 2, ParentTimeline: 3, BranchRevision: 5}}, 3: {Lineage: Lineage{Timeline: 3, ParentTimeline: 2, BranchRevision: 5}}}
	if _, err := Resolve(nil, cyc, 2, 0, time.Time{}); err == nil {
		t.Error("a cycle of parents resolved")
	}
}

// TestBuildChainStaysOnTimeline: a chain never takes another timeline's
// deltas (even ones whose revisions would continue it).
func TestBuildChainStaysOnTimeline(t *testing.T) {
	t1, t2 := Lineage{}, Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 20}
	full := man(KindFull, t1, 1, 10, -time.Hour)
	all := []Manifest{full, man(KindDelta, t1, 11, 20, -50*time.Minute), man(KindDelta, t2, 21, 30, -40*time.Minute)}
	ch := BuildChain(all, full)
	if ch.End != 20 || len(ch.Deltas) != 1 || len(ch.GapAfter) != 0 {
		t.Fatalf("chain %+v: want timeline 1's delta only, ending at 20, no gap", ch)
	}
}

// TestHighestRevision: every trusted backup on every timeline and every
// timeline's start count (an abandoned timeline's too: its restore may
// have got as far as serving); an unauthenticated manifest (which could claim
// any number) does not; the margin is added above the highest, refused
// past int64.
func TestHighestRevision(t *testing.T) {
	all, h := branched()
	if got := HighestRevision(all, h); got != 3_000_000_120 {
		t.Errorf("highest %d, want 3000000120 (abandoned timeline 4's start)", got)
	}
	delete(h, 4)
	if got := HighestRevision(all, h); got != 2_000_000_120 {
		t.Errorf("highest %d, want 2000000120 (timeline 3's start)", got)
	}
	forged := man(KindFull, Lineage{}, 1, math.MaxInt64-1, 0)
	forged.MAC = ""
	if got := HighestRevision(append(all, forged), History{1: {}}); got != 1_000_000_120 {
		t.Errorf("highest %d with an unauthenticated manifest, want 1000000120", got)
	}
	if got, err := ResumeRevision(2_000_000_120, 30, 1_000_000_000); err != nil || got != 3_000_000_120 {
		t.Errorf("ResumeRevision = %d, %v; want 3000000120", got, err)
	}
	if got, err := ResumeRevision(10, 60, 5); err != nil || got != 65 {
		t.Errorf("ResumeRevision above the restored revision = %d, %v; want 65", got, err)
	}
	if _, err := ResumeRevision(math.MaxInt64-5, 0, 10); err == nil {
		t.Error("a resume revision past int64 accepted")
	}
}

// TestPlanRetentionPerTimeline: each timeline keeps its newest full backup
// and chain; a timeline's branch point on its parent is kept (the newest
// parent full at or before the branch revision, and its deltas up to it),
// also for a timeline with no backup yet (the caller names it).
func TestPlanRetentionPerTimeline(t *testing.T) {
	all, _ := branched()
	r := Retention{KeepLast: 1}
	ids := func(ms []Manifest) map[string]bool {
		out := map[string]bool{}
		for _, m := range ms {
			out[m.ID] = true
		}
		return out
	}
	keep, del := PlanRetention(all, r, tlNow)
	k := ids(keep)
	// Timeline 1: newest full (r50) + delta 51-100 (also timeline 2's branch
	// point at 100). Timeline 2: its full and delta. The full at r10 and
	// its deltas are no one's.
	for _, i := range []int{3, 4, 5, 6} {
		if !k[all[i].ID] {
			t.Errorf("%s deleted", all[i].ID)
		}
	}
	for _, i := range []int{0, 1, 2} {
		if k[all[i].ID] {
			t.Errorf("%s kept without the current timeline needing it", all[i].ID)
		}
	}
	if len(keep)+len(del) != len(all) {
		t.Fatalf("keep %d + delete %d != %d", len(keep), len(del), len(all))
	}
	// Timeline 3, the cluster's current one, branched off 1 at 30 and has
	// no backup yet: full r10 and the delta 11-30 stay, the delta 31-50
	// (after the branch) need not.
	keep, _ = PlanRetention(all, r, tlNow, Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 30})
	k = ids(keep)
	if !k[all[0].ID] || !k[all[1].ID] {
		t.Errorf("timeline 3's branch point on timeline 1 (full r10, delta 11-30) deleted: kept %v", k)
	}
	if k[all[2].ID] {
		t.Errorf("delta 31-50, after timeline 3's branch, kept")
	}
}

// TestManifestLineageAuthenticated: a manifest's timeline is under its MAC;
// one without a lineage encodes as before timelines (old manifests keep
// verifying) and is timeline 1; a lineage that contradicts itself is
// refused.
func TestManifestLineageAuthenticated(t *testing.T) {
	k := testAuthKey(3)
	m := Manifest{ID: NewID(KindFull, tlNow, 42), Kind: KindFull, ClusterID: "c", Member: "etcd-1", StartRevision: 1, EndRevision: 42,
		SHA256: strings.Repeat("ab", 32), Compression: compressionZstd, CreatedAt: tlNow}
	m.Object = objectOf(&m)
	if c := string(canonicalManifest(&m).bytes()); strings.Contains(c, "timeline") || strings.Contains(c, "branch") {
		t.Fatalf("a manifest without a lineage encodes one:\n%s", c)
	}
	parse := func(m Manifest) (Manifest, error) {
		b, _ := json.Marshal(m)
		return ParseManifest(b, k)
	}
	old := m
	k.Seal(&old)
	if got, err := parse(old); err != nil || got.TimelineID() != 1 {
		t.Fatalf("a manifest without a lineage: %v, timeline %d; want trusted, timeline 1", err, got.TimelineID())
	}
	m.Lineage = Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 60}
	k.Seal(&m)
	got, err := parse(m)
	if err != nil || got.Lineage != m.Lineage {
		t.Fatalf("a sealed lineage: %+v, %v", got.Lineage, err)
	}
	for name, edit := range map[string]func(*Manifest){
		"timeline changed":        func(m *Manifest) { m.Timeline = 2 },
		"branch revision changed": func(m *Manifest) { m.BranchRevision = 61 },
		"lineage removed":         func(m *Manifest) { m.Lineage = Lineage{} },
	} {
		f := m
		edit(&f)
		if _, err := parse(f); !errors.Is(err, ErrBadMAC) {
			t.Errorf("%s: %v, want ErrBadMAC", name, err)
		}
	}
	for name, l := range map[string]Lineage{
		"parent not older":         {Timeline: 2, ParentTimeline: 2, BranchRevision: 5},
		"branch without parent":    {Timeline: 2, BranchRevision: 5},
		"parent without branch":    {Timeline: 2, ParentTimeline: 1},
		"negative timeline":        {Timeline: -1},
		"timeline 1 with a parent": {Timeline: 1, ParentTimeline: 0, BranchRevision: 3},
	} {
		f := m
		f.Lineage = l
		k.Seal(&f)
		if _, err := parse(f); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: %v, want ErrBadManifest", name, err)
		}
	}
}

// TestTimelineRecords: a history object is stored once per number,
// authenticated; a modified or unauthenticated one is ignored and
// reported, never used.
func TestTimelineRecords(t *testing.T) {
	ctx := context.Background()
	s := &LocalStore{Dir: t.TempDir()}
	k := testAuthKey(5)
	r := TimelineRecord{Lineage: Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 60}, StartRevision: 1_000_000_060, ClusterID: "c", Source: "x", CreatedAt: tlNow}
	if err := PutTimeline(ctx, s, k, &r); err != nil {
		t.Fatal(err)
	}
	again := r
	if err := PutTimeline(ctx, s, k, &again); err == nil {
		t.Fatal("a second record of timeline 2 replaced the first")
	}
	got, ign, err := ListTimelines(ctx, s, k)
	if err != nil || len(got) != 1 || len(ign) != 0 || got[0].Lineage != r.Lineage || got[0].StartRevision != r.StartRevision {
		t.Fatalf("ListTimelines = %+v, %v, %v", got, ign, err)
	}
	// A forged one: timeline 3 claiming a start revision, MAC under another key.
	forged := TimelineRecord{Lineage: Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 10}, StartRevision: 99, CreatedAt: tlNow}
	if err := PutTimeline(ctx, s, testAuthKey(6), &forged); err != nil {
		t.Fatal(err)
	}
	got, ign, err = ListTimelines(ctx, s, k)
	if err != nil || len(got) != 1 || len(ign) != 1 || !errors.Is(ign[0].Err, ErrUnknownKey) {
		t.Fatalf("with a record under another key: %+v, ignored %+v, %v", got, ign, err)
	}
	// Its number is taken all the same: PutTimeline never replaces it.
	if n, err := TakenTimeline(ctx, s); err != nil || n != 3 {
		t.Fatalf("TakenTimeline = %d, %v; want 3 (the record under another key)", n, err)
	}
	if _, err := ParseTimeline(TimelineObject(4), mustJSON(t, r), k); !errors.Is(err, ErrBadManifest) {
		t.Errorf("timeline 2's record stored as timeline 4's: %v, want ErrBadManifest", err)
	}
	tampered := got[0]
	tampered.StartRevision++
	if _, err := ParseTimeline(TimelineObject(2), mustJSON(t, tampered), k); !errors.Is(err, ErrBadMAC) {
		t.Errorf("a modified record: %v, want ErrBadMAC", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParseTimeline reads a history object as it comes out of a store.
// Beyond never panicking: what it accepts is a record the key sealed, and
// what it returns (accepted, unauthenticated or under another key) agrees
// with itself and its name; an error is one of the manifest errors.
func FuzzParseTimeline(f *testing.F) {
	k := testAuthKey(9)
	valid := map[string]bool{}
	for _, r := range []TimelineRecord{
		{Lineage: Lineage{Timeline: 2, ParentTimeline: 1, BranchRevision: 60}, StartRevision: 1_000_000_060, ClusterID: "c", Source: "b", CreatedAt: tlNow},
		{Lineage: Lineage{Timeline: 7}, StartRevision: 5, CreatedAt: tlNow},
	} {
		k.SealTimeline(&r)
		valid[string(canonicalTimeline(&r).bytes())] = true
		f.Add(TimelineObject(r.Timeline), mustJSONf(r))
		u := r
		u.MAC = ""
		f.Add(TimelineObject(r.Timeline), mustJSONf(u))
	}
	f.Add("timelines/00000002.json", []byte(`{"timeline":2,"parentTimeline":3}`))
	f.Add("timelines/../x.json", []byte(`{}`))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		r, err := ParseTimeline(name, b, k)
		switch {
		case err == nil:
			if !valid[string(canonicalTimeline(&r).bytes())] {
				t.Fatalf("accepted a record the key never sealed: %s", b)
			}
		case errors.Is(err, ErrUnauthenticated), errors.Is(err, ErrUnknownKey):
		case errors.Is(err, ErrBadManifest), errors.Is(err, ErrBadMAC):
			if r != (TimelineRecord{}) {
				t.Fatalf("refused (%v) but returned %+v", err, r)
			}
			return
		default:
			t.Fatalf("error outside the manifest errors: %v", err)
		}
		if r.Lineage.check() != nil || TimelineObject(r.Timeline) != name || r.StartRevision < r.BranchRevision {
			t.Fatalf("returned a record that contradicts itself or its name %s: %+v", name, r)
		}
	})
}

func mustJSONf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
