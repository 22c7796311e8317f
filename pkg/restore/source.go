package restore

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// A source is where the database a restore stages its data dirs from (or
// an export writes out) comes from: the backup store (a full backup and the
// deltas after it) or a snapshot file etcdctl saved. Opening one makes
// every check that needs no download; fetch then builds the database.
type source interface {
	// fetch writes the source's database, without etcd's appended hash, at
	// dst (which must not exist) and checks it; prepared.bumped is left 0.
	fetch(ctx context.Context, dst string) (prepared, error)
}

// storeSource is a full backup in the cluster's backup store and the
// deltas of its chain that the target needs.
type storeSource struct {
	c     *cluster.Cluster
	store backup.Store
	full  backup.Manifest
	chain backup.Chain
	o     Options // with the target resolved onto the timeline read
	// history is every timeline the store and the spec know; highest the
	// highest revision they show was ever stored or served.
	history backup.History
	highest int64
	// listing is what the store held, for a refusal that names another
	// backup (lowerStorageVersion).
	listing backup.Listing
}

// openStore picks the chain o asks for and checks what can refuse it
// before anything is fetched: untrusted manifests after the full backup
// and, for a restore, a backup of another etcd cluster than this spec's
// (an export, which changes no cluster, does not check it). verb is
// "restore" or "export", for refusals.
func openStore(ctx context.Context, c *cluster.Cluster, o Options, verb string) (*storeSource, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return nil, err
	}
	listing, err := c.Backups(ctx, store, o.AllowUnauthenticated)
	if err != nil {
		return nil, err
	}
	for _, i := range listing.Ignored {
		c.Progress.Say("ignored %s", i)
	}
	hist, err := loadHistory(ctx, c, store, listing.Backups)
	if err != nil {
		return nil, err
	}
	view := listing
	if o.Backup == "" || o.Backup == "latest" {
		// The newest point of a timeline (the cluster's current one unless
		// o.Timeline names another), or the target on it, which may lie on
		// an ancestor timeline.
		asked := o.Timeline
		if asked == 0 {
			asked = currentTimeline(c, hist)
		}
		tg, err := backup.Resolve(listing.Backups, hist, asked, o.ToRevision, o.ToTime)
		if err != nil {
			return nil, refusalOf(err)
		}
		if tg.Via != 0 {
			c.Progress.Say("timeline %d has no backup at that point: restoring timeline %d (its ancestor) at revision %d", tg.Via, tg.Timeline, tg.ToRevision)
		}
		o.ToRevision, o.ToTime = tg.ToRevision, tg.ToTime
		view.Backups = backup.OnTimeline(listing.Backups, tg.Timeline)
	}
	m, chain, err := pickChain(view, store.String(), o)
	s := &storeSource{c: c, store: store, full: m, chain: chain, o: o, history: hist,
		highest: backup.HighestRevision(listing.Backups, hist), listing: listing}
	if err != nil {
		return s, err
	}
	// A manifest that is not trusted and sorts after the full backup may
	// describe a delta of its chain: restoring without it would silently
	// drop history. Older ones (backups from before the cluster backup key)
	// cannot be part of this chain.
	var later []string
	for _, i := range listing.Ignored {
		if id := path.Base(strings.TrimSuffix(i.Name, ".json")); id > m.ID {
			later = append(later, i.String())
		}
	}
	if len(later) > 0 && !o.SkipUntrusted {
		return s, refusal.New(ErrUntrustedManifests, "refusing to %s from %s: %d newer manifests in the store are not trusted, and what they describe would be left out: %s",
			verb, m.ID, len(later), strings.Join(later, "; "))
	}
	if verb != "restore" {
		return s, nil
	}
	known, err := c.KnownClusterID()
	if err != nil {
		return s, err
	}
	if known != "" && m.ClusterID != known && !o.AllowOtherCluster {
		return s, refusal.New(ErrOtherCluster, "refusing to restore: backup %s is from etcd cluster %s, but this spec's cluster is %s",
			m.ID, m.ClusterID, known)
	}
	return s, nil
}

// loadHistory reads the store's timeline history objects (trusted ones:
// the others are reported and never used) and adds the spec's current
// timeline.
func loadHistory(ctx context.Context, c *cluster.Cluster, store backup.Store, backups []backup.Manifest) (backup.History, error) {
	auth, err := c.BackupAuthKey()
	if err != nil {
		return nil, err
	}
	records, ignored, err := backup.ListTimelines(ctx, store, auth)
	if err != nil {
		return nil, err
	}
	for _, i := range ignored {
		c.Progress.Say("ignored %s", i)
	}
	var extra []backup.TimelineRecord
	if t := c.Spec.Timeline; t != nil && t.ID > 1 {
		// The spec names it: its restore committed (a record of an older
		// Steward has no commit marker).
		extra = append(extra, backup.TimelineRecord{Lineage: c.Lineage(), StartRevision: t.StartRevision, Committed: true})
	}
	return backup.BuildHistory(backups, records, extra...), nil
}

// currentTimeline is the timeline the cluster is on: the spec's, or,
// when the spec records none (a cluster never restored, a new Steward
// directory restoring a store that has branched), the newest committed
// one in the store (backup.History.Latest). A timeline whose restore
// stopped before its commit was never served: taking it would restore its
// branch point and leave out every write after it on its parent.
func currentTimeline(c *cluster.Cluster, h backup.History) int64 {
	if c.Spec.Timeline != nil {
		return c.Spec.TimelineID()
	}
	n, abandoned := h.Latest()
	if len(abandoned) > 0 {
		c.Progress.Say("left out timelines %s: begun by restores that stopped before their commit (never served, no backup of their own)", joinIDs(abandoned))
	}
	if n > 1 {
		c.Progress.Say("this spec records no timeline: reading the newest committed one in the store, timeline %d", n)
	}
	return n
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// refusalOf makes an unknown or abandoned timeline a refusal
// (ErrUnknownTimeline, ErrAbandonedTimeline).
func refusalOf(err error) error {
	switch {
	case errors.Is(err, backup.ErrUnknownTimeline):
		return refusal.New(ErrUnknownTimeline, "refusing to restore: %v", err)
	case errors.Is(err, backup.ErrAbandonedTimeline):
		return refusal.New(ErrAbandonedTimeline, "refusing to restore: %v", err)
	}
	return err
}

// fetch downloads and verifies the full backup, then replays the deltas
// up to the target into it.
func (s *storeSource) fetch(ctx context.Context, dst string) (prepared, error) {
	m, o := s.full, s.o
	p := prepared{full: m, snapshot: dst}
	key, err := s.c.BackupKey(o.KeyFile)
	if err != nil {
		return p, err
	}
	s.c.Progress.Say("fetching and verifying %s (revision %d)", m.ID, m.EndRevision)
	// Without etcd's appended SHA-256 (checked as it streams by): the
	// database is written to below (deltas, revision bump).
	if err := backup.FetchDatabase(ctx, s.store, m, key, dst); err != nil {
		return p, err
	}
	p.revision, p.deltas = m.EndRevision, len(s.chain.Deltas)
	if len(s.chain.Deltas) > 0 {
		s.c.Progress.Say("%s", replaying(m, s.chain, o))
		p.revision, err = backup.Apply(ctx, s.store, key, dst, m.EndRevision, s.chain.Deltas,
			backup.ApplyOptions{ToRevision: o.ToRevision, ToTime: o.ToTime})
		if err != nil {
			return p, err
		}
		if msg := replayed(m, p.revision, o); msg != "" {
			s.c.Progress.Say("%s", msg)
		}
	}
	// A time with a gap after the chain: the replay stopping before the
	// chain's end proves every later revision, the gap's included, was
	// recorded after the time (the events' times follow their revisions);
	// one that reached the end cannot tell whether revisions missing in the
	// gap were written before it, and a restore "as of" that time could
	// silently lack them.
	if !o.ToTime.IsZero() && o.ToRevision == 0 && len(s.chain.GapAfter) > 0 && p.revision >= s.chain.End {
		return p, &GapError{Refusal: refusal.Refusal{Kind: ErrChainGap, Msg: fmt.Sprintf("the delta chain after %s has a gap after revision %d (revisions %d to %d are missing), and %s is after the chain's last recorded change: the missing revisions may have been written before it",
			m.ID, s.chain.End, s.chain.End+1, s.chain.GapAfter[0].StartRevision-1, o.ToTime.UTC().Format(time.RFC3339Nano))}, End: s.chain.End}
	}
	if o.ToRevision > 0 && o.ToTime.IsZero() && p.revision != o.ToRevision {
		return p, fmt.Errorf("revision %d is outside the backed-up range: the chain from %s reaches revision %d", o.ToRevision, m.ID, p.revision)
	}
	p.from = fmt.Sprintf("%s and %d deltas", m.ID, p.deltas)
	return p, nil
}

// fileSource is a snapshot file as `etcdctl snapshot save` writes it.
type fileSource struct {
	c    *cluster.Cluster
	path string
}

// openFile refuses options that only make sense for the backup store
// (nothing is read yet: the file is checked as it is fetched).
func openFile(c *cluster.Cluster, o Options) (*fileSource, error) {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"a backup ID", o.Backup != "" && o.Backup != "latest"},
		{"a target revision", o.ToRevision != 0},
		{"a target time", !o.ToTime.IsZero()},
		{"a timeline", o.Timeline != 0},
		{"a key file", o.KeyFile != ""},
		{"trusting unauthenticated manifests", o.AllowUnauthenticated},
		{"skipping untrusted manifests", o.SkipUntrusted},
	} {
		if f.on {
			set = append(set, f.name)
		}
	}
	if len(set) > 0 {
		return nil, refusal.New(ErrSourceConflict, "refusing to restore from snapshot file %s with %s: a snapshot file restores the one revision it holds, and these choose or read backups in the backup store",
			o.FromSnapshot, strings.Join(set, ", "))
	}
	return &fileSource{c: c, path: o.FromSnapshot}, nil
}

// fetch copies the file without its hash, checking the hash as etcdutl's
// restore does and the database with bbolt's consistency check. The file
// itself is only read.
func (s *fileSource) fetch(ctx context.Context, dst string) (prepared, error) {
	s.c.Progress.Say("checking snapshot file %s", s.path)
	info, err := backup.ImportSnapshot(ctx, s.path, dst)
	if err != nil {
		return prepared{}, fmt.Errorf("refusing to restore from snapshot file: %w", err)
	}
	return prepared{snapshot: dst, revision: info.Revision, from: "snapshot file " + s.path}, nil
}
