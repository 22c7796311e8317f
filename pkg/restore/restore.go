package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Options configure Run.
type Options struct {
	// Backup is a backup ID or "latest".
	Backup string
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
	// Force moves existing data dirs aside instead of refusing.
	Force bool
	// BumpRevision is the safety margin for writes made after the last
	// backup: etcd resumes this far above the highest revision the cluster
	// ever served or stored on any timeline (every trusted backup, the
	// timelines' history, the data dirs replaced), so no client ever sees
	// a revision twice or going backwards; older ones are marked compacted.
	BumpRevision uint64
	// Timeline restores the newest point (or ToRevision / ToTime) of this
	// timeline (0: the one the cluster is on). A point at or before its
	// branch revision is read from its parent.
	Timeline int64
	// ToRevision restores the keyspace as it was at this revision (0: the
	// newest backed-up revision).
	ToRevision int64
	// ToTime restores the keyspace as it was at this time (zero: newest).
	ToTime time.Time
	// AllowUnauthenticated also trusts manifests without a MAC (written
	// before the cluster had its backup key): an operator's deliberate
	// choice to restore an old backup. A manifest whose MAC fails is never
	// trusted.
	AllowUnauthenticated bool
	// SkipUntrusted restores even though manifests newer than the chosen
	// full backup are not trusted, leaving out what they describe.
	SkipUntrusted bool
	// AllowOtherCluster restores a backup taken from another etcd cluster
	// than the one last seen for this spec.
	AllowOtherCluster bool
	// FromSnapshot restores from this snapshot file, as `etcdctl snapshot
	// save` writes it (checked by its appended SHA-256 and bbolt's
	// consistency check), instead of the backup store. It restores the
	// revision the file holds: Backup (other than "latest"), ToRevision,
	// ToTime, KeyFile, AllowUnauthenticated and SkipUntrusted, which choose
	// and read from the store, are refused with it (ErrSourceConflict).
	FromSnapshot string
	// FromMember restores from this stopped member's own database
	// (recovery's reseed: a survivor's data, with every committed entry
	// applied) instead of a backup or a file: the new timeline branches off
	// the cluster's current one at the member's revision. Options that
	// choose or read a backup are refused with it (ErrSourceConflict).
	FromMember string
	// Members restricts the restore to these members' data dirs (empty:
	// every member). The others' data dirs are left as they are. Each
	// restored member still records the whole spec as its initial cluster,
	// so member and cluster IDs are those of a full restore.
	Members []string
}

// DefaultBumpRevision is large enough for any write rate between a backup
// and the disaster (a billion writes), and far from int64's limit.
const DefaultBumpRevision = 1_000_000_000

// Refusals a command can turn into advice about its flags (errors.Is).
var (
	// ErrOtherCluster: the backup is of another etcd cluster than the one
	// last seen for this spec (Options.AllowOtherCluster overrides).
	ErrOtherCluster = errors.New("backup of another cluster")
	// ErrDataDirsHoldData: a target data dir is not empty (Options.Force
	// moves them aside).
	ErrDataDirsHoldData = errors.New("data dirs hold data")
	// ErrUntrustedManifests: the store holds manifests newer than the
	// chosen full backup that are not trusted (corrupt, forged, or
	// unauthenticated): the deltas they describe would be left out
	// (Options.SkipUntrusted restores without them).
	ErrUntrustedManifests = errors.New("untrusted manifests after the backup")
	// ErrChainGap: deltas after a gap in the chain would be lost
	// (Options.ToRevision up to the gap restores what precedes it).
	ErrChainGap = errors.New("gap in the delta chain")
	// ErrBadRevision: Options.ToRevision is negative (0 means the newest).
	ErrBadRevision = errors.New("not a revision")
	// ErrSourceConflict: options that choose or read a backup from the
	// store were given with a snapshot file to restore from.
	ErrSourceConflict = errors.New("options for the backup store given with a snapshot file")
	// ErrConflictingTargets: options that each choose the point to restore
	// were given together (a revision and a time; a backup ID and a
	// timeline).
	ErrConflictingTargets = errors.New("conflicting restore targets")
	// ErrUnknownTimeline: the timeline asked for is not in the store.
	ErrUnknownTimeline = errors.New("unknown timeline")
	// ErrAbandonedTimeline: the timeline asked for was begun by a restore
	// that stopped before its commit and has no backup of its own.
	ErrAbandonedTimeline = errors.New("abandoned timeline")
	// ErrMembersRunning: a member still runs; the cluster must be stopped
	// first (no option overrides it).
	ErrMembersRunning = errors.New("members still run")
	// ErrStoreUnreadable: a restore from a snapshot file or a member's own
	// database could not read the backup store's timelines, so the number
	// of the timeline it begins could reuse one there (no option
	// overrides it).
	ErrStoreUnreadable = errors.New("backup store unreadable")
)

// GapError refuses a restore past a gap in the delta chain; End is the
// last revision before the gap, the newest one a restore can reach.
type GapError struct {
	refusal.Refusal
	End int64
}

// HintStartCluster is the step a restore of every member ends with in its
// last progress line (progress.Hint): the cluster started; the command
// says which of its commands does it.
const HintStartCluster progress.HintKind = "start-cluster"

// Run builds a data dir for every member of the spec (or o.Members) from a
// full backup and the deltas after it (or from a snapshot file etcdctl
// saved, o.FromSnapshot), with the revision bumped and the
// old range marked compacted so watchers get a compaction error and
// re-list instead of missing changes. The cluster must be stopped.
//
// It goes in three phases, and nothing a user owns changes before the
// last: prepare (pick the chain, fetch and verify it, replay the deltas and
// bump the revision, in one snapshot in a temporary dir), stage (a new data
// dir per member, beside its real one), commit (move each old data dir
// aside, never deleting it, put the new one in place, and make the restored
// members initial members in the spec).
func Run(ctx context.Context, c *cluster.Cluster, o Options) (backup.Manifest, error) {
	if err := checkTarget(o); err != nil {
		return backup.Manifest{}, err
	}
	targets := c.Spec.Members
	if len(o.Members) > 0 {
		targets = nil
		for _, name := range o.Members {
			m, err := c.Member(name)
			if err != nil {
				return backup.Manifest{}, err
			}
			targets = append(targets, m)
		}
	}
	lock, err := lockRestore(c, "restore")
	if err != nil {
		return backup.Manifest{}, err
	}
	defer lock.Release()
	if err := requireStopped(ctx, c); err != nil {
		return backup.Manifest{}, err
	}
	// Held while the restore runs. A killed restore's is swept by the next
	// at once (scratch's minimum age is for a maker that has not locked
	// its directory yet: no restore can be one while this one holds the
	// restore lock).
	if _, err := scratch.Sweep(c.Dir, "tmp-restore-", time.Now().Add(scratch.MinAge)); err != nil {
		return backup.Manifest{}, err
	}
	sd, err := scratch.New(c.Dir, "tmp-restore-")
	if err != nil {
		return backup.Manifest{}, err
	}
	defer sd.Remove()
	tmp := sd.Path
	p, err := prepare(ctx, c, o, targets, tmp)
	if err != nil {
		return p.full, err
	}
	staged, err := stage(ctx, c, p, targets)
	if err != nil {
		return p.full, err
	}
	if err := commit(ctx, c, targets, staged, p.timeline); err != nil {
		return p.full, err
	}
	markCommitted(ctx, c, p)
	var then any = progress.Hint{Kind: HintStartCluster, Plain: "start the cluster"}
	if len(targets) < len(c.Spec.Members) {
		then = "the other members' data dirs were left as they are"
	}
	branched := "from a snapshot file"
	if p.timeline.Parent != 0 {
		branched = fmt.Sprintf("branched off timeline %d at revision %d", p.timeline.Parent, p.timeline.BranchRevision)
	}
	c.Progress.Say("restored %d members from %s at revision %d on a new timeline %d, %s (etcd resumes above revision %d, above every revision served before; older ones are marked compacted); %v",
		len(targets), p.from, p.revision, p.timeline.ID, branched, p.bumped, then)
	return p.full, nil
}

// prepared is the snapshot prepare built: the source's database with its
// revision bumped.
type prepared struct {
	full     backup.Manifest // the full backup (zero for a snapshot file)
	from     string          // what it was built from, for messages
	deltas   int
	snapshot string // database file, etcd's appended hash stripped
	revision int64  // the restored keyspace's revision
	bumped   int64  // the revision etcd resumes above
	// timeline is the new timeline the restore begins (recorded in the
	// store by prepare, in the spec by commit, marked committed in the
	// store after it).
	timeline spec.Timeline
	// record is timeline's record as stored (nil: none, the store was
	// unreachable), and store where.
	record *backup.TimelineRecord
	store  backup.Store
	// ids are the etcd IDs the restored data dirs keep.
	ids *datadir.Identity
}

// prepare checks everything that can refuse the restore, then builds the
// snapshot every member's data dir is staged from, inside dir.
func prepare(ctx context.Context, c *cluster.Cluster, o Options, targets []spec.Member, dir string) (prepared, error) {
	var src source
	var full backup.Manifest // the chosen full backup, also on a refusal
	var hist backup.History  // every timeline known, and the highest revision
	var highest int64        // ever stored or served on any
	var store backup.Store   // where the new timeline is recorded (nil: nowhere)
	var parent int64         // the timeline restored (0: a snapshot file)
	switch {
	case o.FromMember != "":
		m, err := openMember(c, o)
		if err != nil {
			return prepared{}, err
		}
		src = m
		if hist, highest, store, err = fileHistory(ctx, c); err != nil {
			return prepared{}, err
		}
		parent = memberTimeline(c, hist)
	case o.FromSnapshot != "":
		f, err := openFile(c, o)
		if err != nil {
			return prepared{}, err
		}
		src = f
		if hist, highest, store, err = fileHistory(ctx, c); err != nil {
			return prepared{}, err
		}
	default:
		s, err := openStore(ctx, c, o, "restore")
		if err != nil {
			if s != nil {
				full = s.full
			}
			return prepared{full: full}, err
		}
		src, full = s, s.full
		hist, highest, store, parent = s.history, s.highest, s.store, s.full.TimelineID()
	}
	var occupied []string
	for _, mem := range targets {
		if c.OnOtherHost(mem) {
			f, err := c.CheckDataDir(ctx, mem)
			if err != nil {
				return prepared{full: full}, err
			}
			if f.State != datadir.Empty {
				occupied = append(occupied, f.DataDir+" on host "+mem.Agent)
			}
			continue
		}
		dd := spec.Path(c.Dir, mem.DataDir)
		if datadir.RequireEmpty(dd) != nil {
			occupied = append(occupied, dd)
		}
	}
	// What the live cluster served after its last backup is in the data
	// dirs a restore replaces: their revisions count as served.
	highest = max(highest, dataDirRevisions(ctx, c))
	if len(occupied) > 0 && !o.Force {
		return prepared{full: full}, refusal.New(ErrDataDirsHoldData, "refusing to restore: data dirs hold data: %v", occupied)
	}
	p, err := src.fetch(ctx, filepath.Join(dir, "snapshot.db"))
	if err != nil {
		return p, err
	}
	if o.BumpRevision == 0 {
		o.BumpRevision = DefaultBumpRevision
	}
	// Bumped once in the shared snapshot, not by etcd's restore per member
	// (which reads the whole database to find the newest revision): above
	// the highest revision served on any timeline, not just the restored
	// one, so a restore to an early revision never goes backwards.
	if p.bumped, err = backup.BumpRevisionAbove(p.snapshot, highest, int64(o.BumpRevision)); err != nil {
		return p, err
	}
	// A backup of a newer etcd is lowered (or refused) before the new
	// timeline is recorded: a refusal changes nothing outside dir.
	if err := lowerStorageVersion(c, p, targets, src); err != nil {
		return p, err
	}
	// The IDs kept, before the record (which names the cluster ID kept).
	if p.ids, err = keptIdentity(ctx, c, p); err != nil {
		return p, fmt.Errorf("the IDs the restored cluster keeps: %w", err)
	}
	// Numbered above every timeline known, abandoned ones too, and above
	// every record name in the store, untrusted ones too.
	id, err := newTimelineID(ctx, c, store, hist)
	if err != nil {
		return p, err
	}
	p.timeline = spec.Timeline{ID: id, StartRevision: p.bumped}
	if parent != 0 {
		p.timeline.Parent, p.timeline.BranchRevision = parent, p.revision
	}
	// Recorded before any data dir changes: the number is taken and the
	// start revision counts for every later restore, even if this one
	// stops before its commit (then it stays abandoned: no commit marker).
	return p, recordTimeline(ctx, c, store, &p, full)
}

// stage writes each target's new data dir beside its real one
// (DATADIR.restoring-STAMP) and returns them by member name: here for a
// member on this machine, by its agent (which is sent the snapshot) for one
// on another host. On failure it removes what it staged (its own output,
// never user data).
func stage(ctx context.Context, c *cluster.Cluster, p prepared, targets []spec.Member) (map[string]string, error) {
	stamp := time.Now().UTC().Format("20060102T150405.000Z")
	staged := map[string]string{}
	if err := removeStagedHere(c); err != nil {
		return nil, err
	}
	ids := p.ids
	c.Progress.Say("%s", describeIdentity(ids))
	to := stageTarget(c, ids)
	undo := func() {
		for _, mem := range targets {
			d, ok := staged[mem.Name]
			if !ok {
				continue
			}
			if c.OnOtherHost(mem) {
				if rt, err := c.RuntimeFor(mem); err == nil {
					_ = rt.DiscardStaged(ctx, mem.Name, d)
				}
				continue
			}
			_ = os.RemoveAll(d)
		}
	}
	for i, mem := range targets {
		c.Progress.Say("writing a new data dir for %s (revision %d)", mem.Name, p.revision)
		var out string
		var err error
		if c.OnOtherHost(mem) {
			var rt memberrt.Runtime
			if rt, err = c.RuntimeFor(mem); err == nil {
				out, err = rt.StageDataDir(ctx, mem.Name, p.snapshot, to)
			}
			if err != nil {
				err = fmt.Errorf("on host %s: %w", mem.Agent, err)
			}
		} else {
			dd := spec.Path(c.Dir, mem.DataDir)
			err = os.MkdirAll(filepath.Dir(dd), 0o700)
			out = dd + ".restoring-" + stamp
			if err == nil {
				// The last member takes the snapshot itself (a temporary
				// file no one needs after it) instead of a copy.
				err = datadir.FromSnapshot(datadir.FromSnapshotOptions{
					Snapshot: p.snapshot, Name: mem.Name, PeerURL: mem.PeerURL,
					InitialCluster: to.InitialCluster, Token: c.Spec.Token, IDs: ids, Move: i == len(targets)-1,
				}, out)
			}
		}
		if err != nil {
			undo()
			return nil, fmt.Errorf("restore member %s: %w", mem.Name, err)
		}
		staged[mem.Name] = out
		c.Progress.Say("restored %s into a new data dir", mem.Name)
		crashpoint.Hit(crashpoint.Indexed(crashpoint.RestoreStaged, i))
	}
	return staged, nil
}

// commit moves each target's old data dir aside and its staged one into
// place (by its agent for a member on another host), then records the
// restored members as initial members of the restored cluster in the spec.
// A failure names where the data waits.
//
// Before the first data dir moves, it writes the marker of an unfinished
// commit (cluster.RestorePendingFile), removed only once the spec is
// saved: while some members hold restored data dirs and others old ones
// of the same cluster, nothing may start them (see the marker's
// invariant). A failure says the restore must be run again.
func commit(ctx context.Context, c *cluster.Cluster, targets []spec.Member, staged map[string]string, tl spec.Timeline) error {
	names := make([]string, len(targets))
	for i, mem := range targets {
		names[i] = mem.Name
	}
	if err := cluster.WriteRestorePending(c.Dir, cluster.RestorePending{Timeline: tl.ID, Members: names, StartedAt: time.Now().UTC()}); err != nil {
		return fmt.Errorf("record the restore's commit before it begins: %w", err)
	}
	if err := commitDataDirs(ctx, c, targets, staged, tl); err != nil {
		return interruptedError{err}
	}
	return cluster.RemoveRestorePending(c.Dir)
}

// interruptedError is a commit's failure: also cluster.ErrRestoreInterrupted,
// as the marker it leaves says.
type interruptedError struct{ err error }

func (e interruptedError) Error() string {
	return e.err.Error() + "; some data dirs may be restored and others not, and members refuse to start until the restore is run again to finish it"
}

func (e interruptedError) Unwrap() []error { return []error{e.err, cluster.ErrRestoreInterrupted} }

// commitDataDirs is commit's work, under its marker.
func commitDataDirs(ctx context.Context, c *cluster.Cluster, targets []spec.Member, staged map[string]string, tl spec.Timeline) error {
	for i, mem := range targets {
		if c.OnOtherHost(mem) {
			rt, err := c.RuntimeFor(mem)
			if err != nil {
				return err
			}
			aside, err := rt.CommitDataDir(ctx, mem.Name, staged[mem.Name])
			if err != nil {
				return fmt.Errorf("put restored data dir of %s in place on host %s: %w", mem.Name, mem.Agent, err)
			}
			if aside != "" {
				c.Progress.Say("moved old data dir of %s on host %s to %s", mem.Name, mem.Agent, aside)
			}
			crashpoint.Hit(crashpoint.Indexed(crashpoint.RestoreCommitted, i))
			continue
		}
		dd := spec.Path(c.Dir, mem.DataDir)
		aside, err := datadir.MoveAside(dd, "pre-restore")
		if err != nil {
			return fmt.Errorf("move data dir of %s aside: %w (restored data waits in %s)", mem.Name, err, staged[mem.Name])
		}
		if aside != "" {
			c.Progress.Say("moved old data dir of %s to %s", mem.Name, aside)
		}
		if err := os.Rename(staged[mem.Name], dd); err != nil {
			return fmt.Errorf("put restored data dir of %s in place: %w (it waits in %s)", mem.Name, err, staged[mem.Name])
		}
		if err := atomicfile.SyncDir(filepath.Dir(dd)); err != nil {
			return fmt.Errorf("put restored data dir of %s in place: %w", mem.Name, err)
		}
		crashpoint.Hit(crashpoint.Indexed(crashpoint.RestoreCommitted, i))
	}
	next := c.Spec.Clone()
	for i := range next.Members {
		if slices.ContainsFunc(targets, func(t spec.Member) bool { return t.Name == next.Members[i].Name }) {
			next.Members[i].Bootstrap = nil
		}
	}
	next.Timeline = &tl
	if err := c.SaveSpec(ctx, next); err != nil {
		return err
	}
	sayKeptHere(c)
	return nil
}

// requireStopped refuses (ErrMembersRunning) when any member still runs:
// one its runtime reports with a process, running or starting, or, on this
// machine, any process on a member's data dir. A runtime that does not
// answer (memberrt.ErrUnreachable: an agent that is not running) reports
// nothing; any other error of a runtime is returned.
func requireStopped(ctx context.Context, c *cluster.Cluster) error {
	// Every agent at once; the first refusal in the spec's order wins.
	rs := hostset.Each(ctx, hostset.All(c.Spec), hostset.Options{}, func(ctx context.Context, a spec.Agent) ([]memberrt.MemberStatus, error) {
		rt, err := c.Runtime(a.Name)
		if err != nil {
			return nil, err
		}
		ms, err := rt.Members(ctx)
		if errors.Is(err, memberrt.ErrUnreachable) {
			return nil, nil
		}
		return ms, err
	})
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
		for _, m := range r.Value {
			if m.PID != 0 || m.State == memberrt.StateRunning || m.State == memberrt.StateStarting {
				return refusal.New(ErrMembersRunning, "refusing to restore while member %s is running: stop the cluster first", m.Name)
			}
		}
	}
	// A member left running by a dead agent: any process on its data dir.
	for _, m := range c.Spec.Members {
		if c.OnOtherHost(m) {
			continue // its agent, asked above, knows its process
		}
		dd := spec.Path(c.Dir, m.DataDir)
		if pid := processOnDataDir(dd); pid != 0 {
			return refusal.New(ErrMembersRunning, "refusing to restore: process %d still runs member %s on %s: stop the cluster first", pid, m.Name, dd)
		}
	}
	return nil
}

// pickChain chooses the full backup and the deltas to restore: the named
// backup (or the newest full one) with every delta after it; or, with
// a target revision or time, the newest full backup at or before the target.
// openStore hands it the backups of one timeline (a named backup: all, and
// its chain stays on its timeline).
// A gap in the chain that later deltas would have filled is refused rather
// than silently dropping them.
func pickChain(listing backup.Listing, store string, o Options) (backup.Manifest, backup.Chain, error) {
	all := listing.Backups
	var full backup.Manifest
	var err error
	switch {
	case o.Backup != "" && o.Backup != "latest":
		if full, err = listing.Find(o.Backup, store); err != nil {
			return full, backup.Chain{}, err
		}
		if full.Kind != backup.KindFull {
			return full, backup.Chain{}, fmt.Errorf("backup %s is a delta; name a full backup (deltas are applied after it)", full.ID)
		}
	case o.ToRevision > 0 || !o.ToTime.IsZero():
		found := false
		for _, m := range all {
			if m.Kind != backup.KindFull {
				continue
			}
			if (o.ToRevision == 0 || m.EndRevision <= o.ToRevision) && (o.ToTime.IsZero() || !m.CreatedAt.After(o.ToTime)) {
				full, found = m, true
			}
		}
		if !found {
			return full, backup.Chain{}, fmt.Errorf("no full backup at or before the target in %s: the oldest restorable point is the first full backup", store)
		}
	default:
		if full, err = listing.Find("latest", store); err != nil {
			return full, backup.Chain{}, err
		}
	}
	if o.ToRevision > 0 && o.ToRevision < full.EndRevision {
		return full, backup.Chain{}, fmt.Errorf("revision %d is outside the range of %s (revisions %d to ...)", o.ToRevision, full.ID, full.EndRevision)
	}
	chain := backup.BuildChain(all, full)
	if o.ToRevision > chain.End {
		return full, chain, fmt.Errorf("revision %d is outside the backed-up range: backups from %s reach revision %d", o.ToRevision, full.ID, chain.End)
	}
	if len(chain.GapAfter) > 0 && (o.ToRevision == 0 || o.ToRevision > chain.End) && o.ToTime.IsZero() {
		return full, chain, &GapError{Refusal: refusal.Refusal{Kind: ErrChainGap, Msg: fmt.Sprintf("the delta chain after %s has a gap: revisions %d to %d are missing, and %d delta segments after the gap would be lost",
			full.ID, chain.End+1, chain.GapAfter[0].StartRevision-1, len(chain.GapAfter))}, End: chain.End}
	}
	return full, chain, nil
}

// processOnDataDir returns the pid of a live process started with
// --data-dir=dataDir, or 0.
func processOnDataDir(dataDir string) int {
	pids := proc.Find(func(args []string) bool { return slices.Contains(args, "--data-dir="+dataDir) })
	if len(pids) == 0 {
		return 0
	}
	return pids[0]
}
