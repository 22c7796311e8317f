package backup

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Timelines, as PostgreSQL's point-in-time recovery has them. Every
// restore (and every recovery that restores) starts a new timeline: the
// history the cluster serves from then on branches off the history it was
// restored from. Timeline 1 is the cluster's first history; timeline N > 1
// has a parent timeline and a branch revision, the last revision of the
// parent it shares (what was restored), and starts at StartRevision (the
// bumped revision etcd resumed above, higher than any revision served
// before on any timeline).
//
// Where it is recorded:
//   - each manifest carries its Lineage (a manifest without one is of
//     timeline 1, written before timelines), under the manifest's MAC;
//   - the store holds one history object per timeline begun by a restore,
//     timelines/NNNNNNNN.json (TimelineRecord), authenticated with the same
//     cluster backup key: it names the timeline's parent, branch and start
//     even before the timeline has a backup of its own, and keeps a second
//     restore from reusing its number;
//   - the restore writes the record before any data dir changes, so a
//     restore that stops before its commit leaves a record of a timeline
//     the cluster never served (abandoned). Once the restored data dirs
//     are in place and the spec names the timeline, it writes the
//     timeline's commit marker, timelines/NNNNNNNN.committed
//     (TimelineCommit, authenticated and bound to the record's MAC; an
//     older Steward's listing skips it, as it is not a .json);
//   - the cluster's current timeline is in the spec (spec.Timeline), which
//     the coordinator hands to every host, so the backup loop on whichever
//     host leads tags what it stores with the timeline every command sees.
//
// A timeline is committed (TimelineRecord.Committed) when its commit
// marker verifies, when it has a backup of its own (the loop tags only the
// spec's timeline, which only a commit writes: so a record of an older
// Steward, which wrote no marker, counts once the cluster backed up on
// it), when the spec names it, and always for timeline 1. Only a committed
// timeline can be the current one by fallback (History.Latest), and an
// abandoned one without a backup cannot be restored (Resolve:
// ErrAbandonedTimeline): it holds nothing of its own.
//
// Invariants: a chain (a full backup and its deltas) never mixes
// timelines; `latest` is the newest point of the current timeline; a
// timeline without a full backup of its own restores from its parent at
// the branch revision; revisions never go backwards across timelines.

// Lineage is where a backup (or a timeline) sits in the branched history.
// The zero value is timeline 1.
type Lineage struct {
	// Timeline is the timeline's number (0 or 1: the first).
	Timeline int64 `json:"timeline,omitempty"`
	// ParentTimeline is the timeline it branched off (0: none, for
	// timeline 1 and for one restored from a snapshot file).
	ParentTimeline int64 `json:"parentTimeline,omitempty"`
	// BranchRevision is the last revision of the parent it shares.
	BranchRevision int64 `json:"branchRevision,omitempty"`
}

// TimelineID is the timeline's number: 1 for the zero value.
func (l Lineage) TimelineID() int64 {
	if l.Timeline < 1 {
		return 1
	}
	return l.Timeline
}

// check refuses a lineage that contradicts itself.
func (l Lineage) check() error {
	if l == (Lineage{}) {
		return nil
	}
	switch {
	case l.Timeline < 1:
		return fmt.Errorf("timeline %d (timelines start at 1)", l.Timeline)
	case l.ParentTimeline < 0 || l.ParentTimeline >= l.Timeline:
		return fmt.Errorf("timeline %d with parent %d (a parent is an older timeline)", l.Timeline, l.ParentTimeline)
	case l.BranchRevision < 0 || (l.ParentTimeline == 0) != (l.BranchRevision == 0):
		return fmt.Errorf("timeline %d: branch revision %d with parent %d (both or neither)", l.Timeline, l.BranchRevision, l.ParentTimeline)
	}
	return nil
}

// TimelineRecord is a timeline's history object in the store
// (timelines/NNNNNNNN.json): written by the restore that begins it, before
// the restored data dirs are put in place. Its JSON field names are stable.
type TimelineRecord struct {
	Format int `json:"format"`
	Lineage
	// StartRevision is the revision etcd resumed above on this timeline:
	// every revision it serves is higher.
	StartRevision int64 `json:"startRevision"`
	// ClusterID is the etcd cluster restored (of the backup restored).
	ClusterID string `json:"clusterID,omitempty"`
	// Source is what was restored: a backup ID, or "snapshot file".
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	MACKeyID  string    `json:"macKeyID"`
	MAC       string    `json:"mac"`
	// Committed is not stored in the record: the restore that began the
	// timeline committed (its marker verifies, it has backups of its own,
	// or the spec names it; always for timeline 1). Set by ListTimelines
	// and BuildHistory.
	Committed bool `json:"-"`
}

// TimelinePrefix is where history objects live in the store.
const TimelinePrefix = "timelines/"

var timelineName = regexp.MustCompile(`^timelines/([0-9]{8})\.json$`)

// TimelineObject is the name of timeline n's history object.
func TimelineObject(n int64) string { return fmt.Sprintf("%s%08d.json", TimelinePrefix, n) }

// TakenTimeline is the highest number an object of the store named like a
// timeline's history object (timelines/NNNNNNNN.json) carries, trusted or
// not (0: none). PutTimeline never replaces an object, so a new timeline
// is numbered above it: numbered from the trusted records only, one record
// under another key or with a bad MAC would make every later restore take
// its number and fail to record it.
func TakenTimeline(ctx context.Context, s Store) (int64, error) {
	names, err := s.List(ctx, TimelinePrefix)
	if err != nil {
		return 0, fmt.Errorf("list timelines in %s: %w", s, err)
	}
	var top int64
	for _, n := range names {
		if g := timelineName.FindStringSubmatch(n); g != nil {
			if v, err := strconv.ParseInt(g[1], 10, 64); err == nil {
				top = max(top, v)
			}
		}
	}
	return top, nil
}

var commitName = regexp.MustCompile(`^timelines/([0-9]{8})\.committed$`)

// TimelineCommitObject is the name of timeline n's commit marker.
func TimelineCommitObject(n int64) string {
	return fmt.Sprintf("%s%08d.committed", TimelinePrefix, n)
}

// TimelineCommit is a timeline's commit marker in the store
// (timelines/NNNNNNNN.committed): written by the restore that began the
// timeline once its data dirs are in place and the spec names it. It is
// bound to the timeline's record (its start revision and MAC), so it
// cannot mark another record committed. Its JSON field names are stable.
type TimelineCommit struct {
	Format        int       `json:"format"`
	Timeline      int64     `json:"timeline"`
	StartRevision int64     `json:"startRevision"`
	RecordMAC     string    `json:"recordMAC"`
	CommittedAt   time.Time `json:"committedAt"`
	MACKeyID      string    `json:"macKeyID"`
	MAC           string    `json:"mac"`
}

// canonicalCommit is the canonical form of a commit marker.
func canonicalCommit(c *TimelineCommit) *canonical {
	cc := newCanonical("steward-timeline-committed")
	cc.i("format", int64(c.Format))
	cc.i("timeline", c.Timeline)
	cc.i("startRevision", c.StartRevision)
	cc.f("recordMAC", c.RecordMAC)
	cc.f("committedAt", c.CommittedAt.UTC().Format(time.RFC3339Nano))
	cc.f("macKeyID", c.MACKeyID)
	return cc
}

func (k *AuthKey) commitMAC(c *TimelineCommit) []byte { return k.sum(canonicalCommit(c)) }

// ParseTimelineCommit parses a stored commit marker and checks it: its
// name, its fields, and its MAC under key (ErrBadManifest, ErrUnknownKey,
// ErrBadMAC; a marker without a MAC is ErrBadManifest: none was ever
// written). Whether it matches its record is the caller's (ListTimelines).
// A pure function of its input.
func ParseTimelineCommit(name string, b []byte, key *AuthKey) (TimelineCommit, error) {
	var c TimelineCommit
	if err := json.Unmarshal(b, &c); err != nil {
		return TimelineCommit{}, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	g := commitName.FindStringSubmatch(name)
	if g == nil {
		return TimelineCommit{}, fmt.Errorf("%w: %q is not a timeline's commit marker", ErrBadManifest, name)
	}
	if n, _ := strconv.ParseInt(g[1], 10, 64); n != c.Timeline || n < 2 {
		return TimelineCommit{}, fmt.Errorf("%w: %s marks timeline %d", ErrBadManifest, name, c.Timeline)
	}
	if c.StartRevision < 1 || c.RecordMAC == "" || c.CommittedAt.IsZero() || c.MAC == "" || c.Format != ManifestFormat {
		return TimelineCommit{}, fmt.Errorf("%w: commit marker of timeline %d is incomplete", ErrBadManifest, c.Timeline)
	}
	if err := verifyMAC(key, c.MACKeyID, c.MAC, func(k *AuthKey) []byte { return k.commitMAC(&c) }); err != nil {
		return TimelineCommit{}, err
	}
	return c, nil
}

// PutTimelineCommit stores the commit marker of r (a record as sealed by
// PutTimeline or read by ListTimelines), authenticated under key.
func PutTimelineCommit(ctx context.Context, s Store, key *AuthKey, r TimelineRecord, at time.Time) error {
	if key == nil {
		return errors.New("mark a timeline committed: no cluster backup key")
	}
	if r.MAC == "" {
		return fmt.Errorf("mark timeline %d committed: its record is not sealed", r.Timeline)
	}
	c := TimelineCommit{Format: ManifestFormat, Timeline: r.Timeline, StartRevision: r.StartRevision, RecordMAC: r.MAC,
		CommittedAt: at.UTC(), MACKeyID: key.ID()}
	c.MAC = hex.EncodeToString(key.commitMAC(&c))
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := s.Put(ctx, TimelineCommitObject(r.Timeline), strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("mark timeline %d committed in %s: %w", r.Timeline, s, err)
	}
	return nil
}

// canonicalTimeline is the canonical form of a timeline record.
func canonicalTimeline(r *TimelineRecord) *canonical {
	c := newCanonical("steward-timeline")
	f, i := c.f, c.i
	i("format", int64(r.Format))
	i("timeline", r.Timeline)
	i("parentTimeline", r.ParentTimeline)
	i("branchRevision", r.BranchRevision)
	i("startRevision", r.StartRevision)
	f("clusterID", r.ClusterID)
	f("source", r.Source)
	f("createdAt", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	f("macKeyID", r.MACKeyID)
	return c
}

func (k *AuthKey) timelineMAC(r *TimelineRecord) []byte { return k.sum(canonicalTimeline(r)) }

// SealTimeline authenticates r under k.
func (k *AuthKey) SealTimeline(r *TimelineRecord) {
	r.Format, r.MACKeyID, r.MAC = ManifestFormat, k.ID(), ""
	r.MAC = hex.EncodeToString(k.timelineMAC(r))
}

// ParseTimeline parses a stored history object and checks it: that it
// agrees with itself and its name, and that its MAC verifies under key
// (ErrBadManifest, ErrUnauthenticated, ErrUnknownKey, ErrBadMAC as for
// manifests). A pure function of its input.
func ParseTimeline(name string, b []byte, key *AuthKey) (TimelineRecord, error) {
	var r TimelineRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return TimelineRecord{}, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	g := timelineName.FindStringSubmatch(name)
	if g == nil {
		return TimelineRecord{}, fmt.Errorf("%w: %q is not a timeline's history object", ErrBadManifest, name)
	}
	if n, _ := strconv.ParseInt(g[1], 10, 64); n != r.Timeline || n < 2 {
		return TimelineRecord{}, fmt.Errorf("%w: %s describes timeline %d", ErrBadManifest, name, r.Timeline)
	}
	if err := r.Lineage.check(); err != nil {
		return TimelineRecord{}, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if r.StartRevision < r.BranchRevision || r.StartRevision < 1 || r.CreatedAt.IsZero() {
		return TimelineRecord{}, fmt.Errorf("%w: timeline %d starts at revision %d (branch %d)", ErrBadManifest, r.Timeline, r.StartRevision, r.BranchRevision)
	}
	if r.MAC == "" {
		return r, ErrUnauthenticated
	}
	if r.Format != ManifestFormat {
		return TimelineRecord{}, fmt.Errorf("%w: unknown format %d", ErrBadMAC, r.Format)
	}
	if err := verifyMAC(key, r.MACKeyID, r.MAC, func(k *AuthKey) []byte { return k.timelineMAC(&r) }); err != nil {
		if errors.Is(err, ErrBadMAC) {
			return TimelineRecord{}, err
		}
		return r, err
	}
	return r, nil
}

// PutTimeline stores r's history object, authenticated under key. It
// refuses to replace one that exists (two restores racing for a number).
func PutTimeline(ctx context.Context, s Store, key *AuthKey, r *TimelineRecord) error {
	if key == nil {
		return errors.New("store a timeline: no cluster backup key")
	}
	key.SealTimeline(r)
	name := TimelineObject(r.Timeline)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// Put replaces nothing: a second restore racing for the number fails.
	if err := s.Put(ctx, name, strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("record timeline %d in %s: %w", r.Timeline, s, err)
	}
	return nil
}

// ListTimelines returns the trusted history objects of the store, by
// number, each Committed when its commit marker verifies and matches it,
// and those it ignored (untrusted records and markers are never used).
func ListTimelines(ctx context.Context, s Store, key *AuthKey) ([]TimelineRecord, []Ignored, error) {
	names, err := s.List(ctx, TimelinePrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("list timelines in %s: %w", s, err)
	}
	var out []TimelineRecord
	var ign []Ignored
	var markers []string
	for _, n := range names {
		if strings.HasPrefix(n, TimelinePrefix) && strings.HasSuffix(n, ".committed") {
			markers = append(markers, n)
			continue
		}
		if !strings.HasPrefix(n, TimelinePrefix) || !strings.HasSuffix(n, ".json") {
			continue
		}
		b, err := readSmall(ctx, s, n)
		var r TimelineRecord
		if err == nil {
			r, err = ParseTimeline(n, b, key)
		}
		if err != nil {
			ign = append(ign, Ignored{Name: n, Reason: err.Error(), Err: err})
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Timeline < out[j].Timeline })
	for _, n := range markers {
		b, err := readSmall(ctx, s, n)
		var c TimelineCommit
		if err == nil {
			c, err = ParseTimelineCommit(n, b, key)
		}
		if err == nil {
			i := sort.Search(len(out), func(i int) bool { return out[i].Timeline >= c.Timeline })
			if i < len(out) && out[i].Timeline == c.Timeline && out[i].MAC == c.RecordMAC && out[i].StartRevision == c.StartRevision {
				out[i].Committed = true
				continue
			}
			err = fmt.Errorf("%w: it marks a record of timeline %d that is not in the store or not trusted", ErrBadManifest, c.Timeline)
		}
		ign = append(ign, Ignored{Name: n, Reason: err.Error(), Err: err})
	}
	return out, ign, nil
}

func readSmall(ctx context.Context, s Store, name string) ([]byte, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, 1<<16))
}

// History is what is known of every timeline: its lineage and where it
// starts, from history objects and the manifests that carry lineages.
type History map[int64]TimelineRecord

// BuildHistory gathers the timelines the backups, the history objects and
// extra (the spec's current timeline: pass it Committed) name. Timeline 1
// is always there, committed; so is every timeline with a backup of its
// own (only a committed timeline is ever backed up).
func BuildHistory(backups []Manifest, records []TimelineRecord, extra ...TimelineRecord) History {
	h := History{1: {Lineage: Lineage{Timeline: 1}, Committed: true}}
	add := func(r TimelineRecord) {
		id := r.TimelineID()
		r.Timeline = id
		if old, ok := h[id]; ok {
			r.StartRevision = max(r.StartRevision, old.StartRevision)
			r.Committed = r.Committed || old.Committed
			if old.ParentTimeline != 0 {
				r.Lineage = old.Lineage // the first seen wins (records first)
			}
		}
		h[id] = r
	}
	for _, r := range records {
		add(r)
	}
	for _, r := range extra {
		add(r)
	}
	for _, m := range backups {
		add(TimelineRecord{Lineage: m.Lineage, Committed: true})
	}
	return h
}

// Latest is the newest committed timeline: the current one for a spec
// that records none (a cluster never restored, a new Steward directory
// restoring a store). Abandoned is every newer timeline skipped: begun by
// a restore that never committed (no marker, no backup of its own).
func (h History) Latest() (latest int64, abandoned []int64) {
	latest = 1
	for _, id := range h.IDs() {
		if h[id].Committed {
			latest = id
		}
	}
	for _, id := range h.IDs() {
		if id > latest {
			abandoned = append(abandoned, id)
		}
	}
	return latest, abandoned
}

// Newest is the highest timeline number known, committed or not: the next
// restore's timeline is numbered above it.
func (h History) Newest() int64 {
	n := int64(1)
	for id := range h {
		n = max(n, id)
	}
	return n
}

// IDs are the known timelines, ascending.
func (h History) IDs() []int64 {
	var ids []int64
	for id := range h {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ErrUnknownTimeline: the timeline asked for is not in the store's history.
var ErrUnknownTimeline = errors.New("unknown timeline")

// ErrAbandonedTimeline: the timeline asked for was begun by a restore that
// never committed, and has no backup of its own: it holds nothing.
var ErrAbandonedTimeline = errors.New("abandoned timeline")

// Target is where on the branched history a restore goes: the timeline
// whose backups it reads and the point on it (0 / zero: its newest).
type Target struct {
	Timeline   int64
	ToRevision int64
	ToTime     time.Time
	// Via is the timeline asked for, when the point lies on an ancestor
	// (Timeline) of it: a revision at or before its branch revision, or a
	// timeline without a full backup of its own.
	Via int64
}

// Resolve finds where a restore of timeline t (at toRevision / toTime, or
// its newest point) reads from. A point on timeline t at or before its
// branch revision is on its parent (and so on up); a timeline without a
// full backup of its own is restored from its parent at the branch
// revision. A revision after the branch revision but before the timeline's
// start was never served on it and is refused; so is a timeline whose
// restore never committed, unless it has backups of its own
// (ErrAbandonedTimeline).
func Resolve(backups []Manifest, h History, t, toRevision int64, toTime time.Time) (Target, error) {
	asked := t
	if _, ok := h[t]; !ok {
		return Target{}, fmt.Errorf("%w %d: the store knows timelines %s", ErrUnknownTimeline, t, joinIDs(h.IDs()))
	}
	if l := h[t]; !l.Committed && len(OnTimeline(backups, t)) == 0 {
		from := "a snapshot file"
		if l.ParentTimeline != 0 {
			from = fmt.Sprintf("timeline %d at revision %d", l.ParentTimeline, l.BranchRevision)
		}
		return Target{}, fmt.Errorf("%w %d: the restore that began it stopped before its commit, and it has no backup of its own (it would restore %s)",
			ErrAbandonedTimeline, t, from)
	}
	for range len(h) + 1 {
		l := h[t]
		own := false
		for _, m := range backups {
			if m.Kind != KindFull || m.TimelineID() != t {
				continue
			}
			if (toRevision == 0 || m.EndRevision <= toRevision) && (toTime.IsZero() || !m.CreatedAt.After(toTime)) {
				own = true
			}
		}
		switch {
		case own:
		case l.ParentTimeline == 0:
		case toRevision == 0 || toRevision <= l.BranchRevision:
			if toRevision == 0 {
				toRevision = l.BranchRevision
			}
			t = l.ParentTimeline
			if _, ok := h[t]; !ok {
				return Target{}, fmt.Errorf("%w %d: the parent of timeline %d is not in the store", ErrUnknownTimeline, t, l.Timeline)
			}
			continue
		case toRevision < l.StartRevision:
			return Target{}, fmt.Errorf("revision %d is not on timeline %d: it shares revisions up to %d with timeline %d and begins above revision %d",
				toRevision, l.Timeline, l.BranchRevision, l.ParentTimeline, l.StartRevision)
		}
		tg := Target{Timeline: t, ToRevision: toRevision, ToTime: toTime}
		if t != asked {
			tg.Via = asked
		}
		return tg, nil
	}
	return Target{}, fmt.Errorf("%w: the timelines' parents form a cycle", ErrBadManifest)
}

// OnTimeline keeps the backups of timeline t.
func OnTimeline(backups []Manifest, t int64) []Manifest {
	var out []Manifest
	for _, m := range backups {
		if m.TimelineID() == t {
			out = append(out, m)
		}
	}
	return out
}

// HighestRevision is the highest revision the backups (authenticated ones
// only: an unauthenticated manifest could claim any number) and the
// history objects show was ever stored or served, on any timeline.
func HighestRevision(backups []Manifest, h History) int64 {
	var top int64
	for _, m := range backups {
		if m.Authenticated() {
			top = max(top, m.EndRevision)
		}
	}
	for _, r := range h {
		top = max(top, r.StartRevision)
	}
	return top
}

// ResumeRevision is the revision a restored cluster resumes above: margin
// above both the highest revision ever seen and the restored one. It
// refuses a sum past int64.
func ResumeRevision(highest, restored, margin int64) (int64, error) {
	base := max(highest, restored)
	if margin <= 0 || base > math.MaxInt64-margin {
		return 0, fmt.Errorf("cannot resume above revision %d with a margin of %d: past etcd's largest revision", base, margin)
	}
	return base + margin, nil
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ", ")
}
