// Package recovery brings back a cluster that lost quorum (DEP-01):
// restart a majority that kept its data, or rebuild from one seed (a
// survivor not behind the newest backup, else the backup restored) run
// with --force-new-cluster, then add the others as learners. The journal
// (DIR/status/recovery.json) makes an interrupted recovery resume from its
// seed; RunAuto is the agent's automatic recovery.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/isolated"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Report says what Recover found and did.
type Report struct {
	// Action is "none", "restart", "reseed" (rebuilt from a surviving
	// member's own data), "restore" (from backup) or "resume" (an
	// interrupted reseed or restore continued from its seed).
	Action   string            `json:"action"`
	DataDirs []datadir.Finding `json:"dataDirs"`
	// NewestBackupRevision is the newest revision in the backup store.
	NewestBackupRevision int64  `json:"newestBackupRevision"`
	RestoredFrom         string `json:"restoredFrom,omitempty"`
	// Seed is the member the cluster was rebuilt from (restored into, or a
	// survivor); Added, the members then added to it as learners;
	// FreshBackup, the full snapshot taken in between.
	Seed        string   `json:"seed,omitempty"`
	Added       []string `json:"added,omitempty"`
	FreshBackup string   `json:"freshBackup,omitempty"`
	// Replaced are the members without valid data re-added after a restart.
	Replaced []string `json:"replaced,omitempty"`
	Message  string   `json:"message"`
}

// RerunError: the recovery stopped part way, and running it again
// continues it (its journal says where). The command words the advice
// (cli.LibraryAdvice) from the fields: Before, what to know first; After,
// what a re-run repeats; Unadded, the members it did not add (each may be
// replaced instead).
type RerunError struct {
	Err           error
	Before, After string
	Unadded       []string
}

func (e *RerunError) Error() string { return e.Err.Error() }
func (e *RerunError) Unwrap() error { return e.Err }

// ErrPlanOpen: a recovery refused because a plan is open (it stops
// members on purpose): resume or abort it first.
var ErrPlanOpen = errors.New("a plan is open")

// ErrJournalUnreadable: the recovery journal cannot be read; it records
// an unfinished recovery, and nothing is done until it is removed.
var ErrJournalUnreadable = errors.New("the recovery journal is unreadable")

// ErrStaleJournal: the recovery journal records a rebuild from a
// survivor's own data (Reseeding) while the cluster is quorate, which that
// rebuild cannot be: Run refuses to resume it and leaves the journal.
var ErrStaleJournal = errors.New("the recovery journal is stale")

// staleReseed fails with ErrStaleJournal when journal j records a reseed
// not yet rebuilt (Reseeding) while the cluster is quorate. Until the
// rebuild ends, the seed runs only on private ports (reseed.go), so a
// quorate cluster is not that rebuild: the journal is an old copy (one
// written by a takeover, say), and resuming it would stop every member of
// a healthy cluster and force a new cluster from the seed. Nothing is
// changed; the journal stays for the operator to look at.
func staleReseed(c *cluster.Cluster, j *recoveryJournal, quorate bool) error {
	if j == nil || !j.Reseeding || !quorate {
		return nil
	}
	return fmt.Errorf("%w: %s records a rebuild of %s from its own data (%s, not finished), but the cluster is quorate, which it cannot be during that rebuild (the seed serves no client then); resuming would stop every member of a healthy cluster, so nothing was changed: check the cluster's health, then move the journal aside", ErrStaleJournal, recoveryJournalPath(c), j.Seed, j.SeededAt.Format(time.RFC3339))
}

// Run brings back a cluster that lost quorum, following DEP-01:
//
//   - when a majority of members still have valid data (a WAL and a
//     database that opens), restart them and lose nothing, then replace the
//     members whose data is gone;
//   - otherwise rebuild the cluster from one member, the seed, take a fresh
//     full snapshot, and add the others (recoverFromSeed). The seed is a
//     surviving member whose data is not behind the newest backup, when
//     there is one (it loses nothing the backup has, and keeps what the
//     backup missed); else the newest backup with its deltas is restored
//     into the spec's first member.
//
// A recovery interrupted after its seed became a cluster of one (see
// recoveryJournal) is resumed, never restored again. Apart from that, a
// quorate cluster is left alone.
//
// The journal and the status are read again once recover.lock is held:
// a recovery that finished between the first look and the lock leaves
// nothing to do, and acting on the first look would recover the cluster
// it just brought back.
func Run(ctx context.Context, c *cluster.Cluster) (Report, error) {
	return run(ctx, c, runDeps{view: readView, fence: fence})
}

// runAuto is Run for the automatic loop (RunAuto): on a multi-host
// cluster each disruptive action is checked against Decide first
// (runDeps.auto).
func runAuto(ctx context.Context, c *cluster.Cluster) (Report, error) {
	return run(ctx, c, runDeps{view: readView, fence: fence, auto: true})
}

// ErrNotProven: an automatic recovery on a multi-host cluster found, right
// before a disruptive action, that Decide does not prove quorum lost
// everywhere (a majority may be alive where the coordinator cannot see
// it): it changed nothing more and waits for the next round.
var ErrNotProven = errors.New("quorum is not proven lost everywhere")

// runDeps are what Run reads from running processes (the journal beside
// the cluster's status), apart so the order of its checks under
// recover.lock is tested without processes.
type runDeps struct {
	view func(ctx context.Context, c *cluster.Cluster) (*recoveryJournal, *status.Status, error)
	// fence fails when this directory is no longer the coordinator of a
	// multi-host cluster (fence).
	fence func(ctx context.Context, c *cluster.Cluster) error
	// auto: the automatic loop runs it (runAuto).
	auto bool
}

// proven fails with ErrNotProven when the automatic loop runs the
// recovery of a multi-host cluster and Decide, on a fresh view, does not
// prove quorum lost everywhere; else it returns nil.
//
// Invariant: an automatic recovery on a multi-host cluster stops a
// member, rebuilds a seed or restores only right after Decide, on a view
// read then, proved quorum lost everywhere: the loop's round checks it
// before it starts a fresh one (for the whole grace period), but a
// journaled recovery is resumed without that (its seed alone may be the
// cluster), so run checks it again before each disruptive action: before
// it stops a seed that is not serving, before it rebuilds one (a reseed
// not finished), and before it stops every member (a fresh recovery, or a
// resumed one whose seed's data is gone). A resume whose seed serves goes
// on without it: that seed is the cluster, and finishing adds members to
// it. A manual `steward recover` is the operator's decision, not checked.
func (d runDeps) proven(ctx context.Context, c *cluster.Cluster, before string) error {
	if !d.auto || !c.Spec.MultiHost() {
		return nil
	}
	_, st, err := d.view(ctx, c)
	if err != nil {
		return fmt.Errorf("not %s: %w", before, err)
	}
	if dec := Decide(Observe(st, c)); !dec.Act {
		return fmt.Errorf("%w: not %s: %s", ErrNotProven, before, dec.Reason)
	}
	return nil
}

// readView reads the recovery journal and the cluster's status.
func readView(ctx context.Context, c *cluster.Cluster) (*recoveryJournal, *status.Status, error) {
	j, err := readRecoveryJournal(c)
	if err != nil {
		return nil, nil, err
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return j, st, nil
}

// QuorateMessage is the report's message when the cluster is quorate and
// nothing was done (the command adds how to replace single members).
const QuorateMessage = "the cluster is quorate: nothing to recover"

func run(ctx context.Context, c *cluster.Cluster, d runDeps) (Report, error) {
	rep := Report{Action: "none", DataDirs: []datadir.Finding{}}
	// Members of a restore stopped in its commit must not start: the
	// old ones would overwrite the restored (cluster.RestorePendingFile).
	if err := cluster.RequireNoRestorePending(c.Dir, "recover the cluster"); err != nil {
		return rep, err
	}
	// A stale rebuild journal (staleReseed) is refused before
	// recover.lock is taken, when it can be told without it: it needs the
	// journal (a file) and, only when that records a rebuild, whether the
	// cluster is quorate (a status read). Every other path reads the
	// status once, under the lock, and the check is made there again.
	if j, err := readRecoveryJournal(c); err == nil && j != nil && j.Reseeding {
		if _, st, err := d.view(ctx, c); err == nil {
			if err := staleReseed(c, j, st.Cluster.Quorate); err != nil {
				return rep, err
			}
		}
	}
	// One recovery at a time (a manual one and the agent's automatic one
	// could otherwise race), and none under an upgrade plan, which stops
	// members on purpose.
	//
	// Invariant: every decision below is taken on the view read once
	// recover.lock is held, so no other recovery ran between that read
	// and the action (one read: a status without quorum waits out the
	// probe timeout, docs/benchmarks.md). Without the lock the view only
	// says whether there is anything to recover.
	lock, err := filelock.TryLock(recoverLockPath(c))
	if err != nil {
		j, st, verr := d.view(ctx, c)
		if verr != nil {
			return rep, verr
		}
		if st.Cluster.Quorate && j == nil {
			rep.Message = QuorateMessage
			return rep, nil
		}
		if errors.Is(err, filelock.ErrHeld) {
			return rep, heldError(recoverLockPath(c))
		}
		return rep, err
	}
	defer lock.Release()
	j, st, err := d.view(ctx, c)
	if err != nil {
		return rep, err
	}
	if st.Cluster.Quorate && j == nil {
		rep.Message = QuorateMessage
		return rep, nil
	}
	if _, err := plan.Admit(c.Plans(), admitRecovery); err != nil {
		return rep, err
	}
	// A coordinator another machine took over from changes nothing: the
	// check comes before any member is stopped, for `steward recover` as
	// for the automatic loop (which also checks before it records acting).
	if c.Spec.MultiHost() {
		if err := d.fence(ctx, c); err != nil {
			return rep, err
		}
	}
	if err := staleReseed(c, j, st.Cluster.Quorate); err != nil {
		return rep, err
	}
	if j != nil {
		seed, ok := c.Spec.Member(j.Seed)
		if ok {
			// A serving seed is resumed as it is; a stopped one only if its
			// data dir holds the cluster still (a running etcd's database
			// cannot be opened to check).
			if sm, _ := st.Member(seed.Name); sm.Healthy {
				return rep, resumeRecovery(ctx, c, &rep, j, d)
			}
			if err := d.proven(ctx, c, "stopping seed "+seed.Name+" to check its data"); err != nil {
				return rep, err
			}
			if err := membership.Stop(ctx, c, seed.Name, true); err != nil && !memberrt.IsNotFound(err) {
				return rep, fmt.Errorf("stop %s: %w", seed.Name, err)
			}
			f, err := c.CheckDataDir(ctx, *seed)
			if err != nil {
				return rep, err
			}
			if f.State == datadir.Valid {
				rep.DataDirs = append(rep.DataDirs, f)
				return rep, resumeRecovery(ctx, c, &rep, j, d)
			}
			if j.Reseeding {
				// Its old data is kept aside (the rebuild moves it, never
				// deletes it); restoring a backup instead would lose the
				// writes only it holds.
				return rep, fmt.Errorf("the unfinished recovery of %s was rebuilding %s from its own data, but its data dir is not usable now (%s): its old data dir is kept beside it as a pre-restore copy; put that back in place, then re-run the recovery", j.SeededAt.Format(time.RFC3339), j.Seed, f)
			}
			c.Progress.Say("the unfinished recovery of %s seeded %s, but its data dir is not usable now (%s)", j.SeededAt.Format(time.RFC3339), j.Seed, f)
		} else {
			c.Progress.Say("the unfinished recovery of %s seeded %s, which is no longer in the spec", j.SeededAt.Format(time.RFC3339), j.Seed)
		}
		if st.Cluster.Quorate {
			rep.Message = "the cluster is quorate: nothing to recover; the journal of an unfinished recovery was dropped"
			return rep, removeRecoveryJournal(ctx, c)
		}
	}
	if err := d.proven(ctx, c, "stopping every member"); err != nil {
		return rep, err
	}
	c.Progress.Say("quorum lost (%s); stopping every member to inspect its data", st.Unhealthy())
	for _, m := range c.Spec.Members {
		if err := membership.Stop(ctx, c, m.Name, true); err != nil && !memberrt.IsNotFound(err) {
			return rep, fmt.Errorf("stop %s: %w", m.Name, err)
		}
	}
	store, err := c.BackupStore(ctx)
	if err != nil {
		return rep, err
	}
	listing, err := c.Backups(ctx, store, false)
	if err != nil {
		return rep, err
	}
	for _, i := range listing.Ignored {
		c.Progress.Say("ignored %s", i)
	}
	for _, m := range listing.Backups {
		if st.Cluster.ID == "" || m.ClusterID == st.Cluster.ID {
			rep.NewestBackupRevision = max(rep.NewestBackupRevision, m.EndRevision)
		}
	}
	valid := 0
	var lost []string
	for _, m := range c.Spec.Members {
		f, err := c.CheckDataDir(ctx, m)
		if err != nil {
			return rep, err
		}
		if stale, why := earlierTimeline(f, c.Spec.Timeline); stale {
			// Not this timeline's data: counted as lost, so that it is
			// never started beside the timeline's members (a restore into
			// the seed whose run was interrupted leaves exactly that mix).
			f.State, f.Problem = datadir.Invalid, why
		}
		note := ""
		if f.State == datadir.Valid && f.Revision < rep.NewestBackupRevision {
			// Not disqualifying: the member replays its WAL on start, and
			// raft brings a majority to the newest committed entry.
			note = fmt.Sprintf(" (database at revision %d, behind the newest backup %d; its WAL replays on start)", f.Revision, rep.NewestBackupRevision)
		}
		c.Progress.Say("  %s: %s%s", m.Name, f, note)
		rep.DataDirs = append(rep.DataDirs, f)
		if f.State == datadir.Valid {
			valid++
		} else {
			lost = append(lost, m.Name)
		}
	}
	quorum := len(c.Spec.Members)/2 + 1
	if valid >= quorum {
		rep.Action = "restart"
		c.Progress.Say("%d of %d members have valid data (quorum %d): restarting them, nothing is lost", valid, len(c.Spec.Members), quorum)
		for i, m := range c.Spec.Members {
			if rep.DataDirs[i].State == datadir.Valid {
				if err := membership.Start(ctx, c, m.Name); err != nil {
					return rep, err
				}
			}
		}
		if err := status.WaitQuorum(ctx, c, 2*time.Minute); err != nil {
			return rep, err
		}
		for _, name := range lost {
			c.Progress.Say("replacing %s, whose data is not usable", name)
			if err := membership.Replace(ctx, c, name, 0); err != nil {
				return rep, fmt.Errorf("quorum is back, but replacing %s failed: %w", name, err)
			}
			rep.Replaced = append(rep.Replaced, name)
		}
		rep.Message = fmt.Sprintf("restarted %d members with valid data; replaced %d", valid, len(rep.Replaced))
		_, err := status.WaitHealthy(ctx, c)
		return rep, err
	}

	// A surviving member whose database is at or past the newest backup
	// holds every write the backup holds (a member applies only committed
	// entries, in the one order raft gives), and maybe later ones: it seeds
	// the cluster instead of the backup, which would lose those.
	best := -1
	for i, f := range rep.DataDirs {
		if f.State == datadir.Valid && f.Revision >= rep.NewestBackupRevision && (best < 0 || f.Revision > rep.DataDirs[best].Revision) {
			best = i
		}
	}
	if best >= 0 {
		survivor := c.Spec.Members[best]
		rep.Action = "reseed"
		c.Progress.Say("only %d of %d members have valid data (quorum %d); %s is at revision %d, not behind the newest backup (%d): rebuilding the cluster from its data, then adding the others",
			valid, len(c.Spec.Members), quorum, survivor.Name, rep.DataDirs[best].Revision, rep.NewestBackupRevision)
		return rep, recoverFromSeed(ctx, c, &rep, survivor, false)
	}
	rep.Action = "restore"
	if rep.NewestBackupRevision == 0 {
		return rep, fmt.Errorf("only %d of %d members have valid data (quorum %d) and there is no backup to restore: the cluster cannot be recovered by Steward",
			valid, len(c.Spec.Members), quorum)
	}
	c.Progress.Say("only %d of %d members have valid data (quorum %d), none of them as new as the newest backup: restoring from backup into one member, then adding the others", valid, len(c.Spec.Members), quorum)
	return rep, recoverFromSeed(ctx, c, &rep, c.Spec.Members[0], true)
}

// earlierTimeline reports whether a valid data dir holds an earlier
// timeline's data: a restore began the spec's timeline at tl.StartRevision
// (the revision etcd resumed above), and every member of this timeline was
// restored there or joined since, so a database below it was never part of
// this timeline. Started beside a restored member (same member and cluster
// IDs, a longer raft log), its old history would win the election and
// overwrite the restored one: the revisions served would go backwards and
// the writes of the backup would be lost.
func earlierTimeline(f datadir.Finding, tl *spec.Timeline) (bool, string) {
	if f.State != datadir.Valid || tl == nil || tl.StartRevision <= 0 || f.Revision >= tl.StartRevision {
		return false, ""
	}
	return true, fmt.Sprintf("its database (revision %d) is of an earlier timeline than the cluster's timeline %d, which began at revision %d: not started beside it (it would be replaced)",
		f.Revision, tl.ID, tl.StartRevision)
}

// recoverFromSeed is DEP-01's recovery of a cluster whose majority lost
// its data, in the order the design gives:
//
//  1. with fromBackup, restore the newest backup, with its deltas applied,
//     into one member (the seed: the first member of the spec). It records
//     the whole spec as its initial cluster, so its member ID and the
//     cluster ID are kept and the old chain of backups stays this
//     cluster. Without fromBackup, the seed is a surviving member whose own
//     data is not behind the backup, and keeps it;
//  2. run the seed alone, on a private client port, with
//     --force-new-cluster until a write commits: etcd drops the other
//     members from the membership (and any entry its WAL holds that was
//     never committed), and the seed is a cluster of one;
//  3. start it for clients and take a fresh full snapshot;
//  4. add every other member as a learner (its data dir moved aside, never
//     deleted) that receives the data from the seed, and promote it once it
//     has caught up.
//
// Steps 3 and 4 run under the recovery journal written after step 2, so an
// interrupted recovery resumes there (resumeRecovery).
func recoverFromSeed(ctx context.Context, c *cluster.Cluster, rep *Report, seed spec.Member, fromBackup bool) error {
	rep.Seed = seed.Name
	if !fromBackup {
		j, err := reseed(ctx, c, seed)
		if err != nil {
			return err
		}
		return finishRecovery(ctx, c, rep, j)
	}
	m, err := restore.Run(ctx, c, restore.Options{Force: true, Members: []string{seed.Name}})
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	rep.RestoredFrom = m.ID
	again := "the restore is repeated"
	c.Progress.Say("%s: running it alone with --force-new-cluster on a private client port until a write commits", seed.Name)
	if err := isolated.Run(ctx, c, []string{seed.Name}, c.Spec.VersionOf(seed), isolated.Options{ForceNewCluster: true, Timeout: 2 * time.Minute}); err != nil {
		return &RerunError{Err: fmt.Errorf("make %s a cluster of one: %w", seed.Name, err), After: again}
	}
	j := &recoveryJournal{Seed: seed.Name, RestoredFrom: rep.RestoredFrom, SeededAt: time.Now().UTC()}
	if err := writeRecoveryJournal(ctx, c, j); err != nil {
		return &RerunError{Err: fmt.Errorf("%s is a cluster of one, but the recovery journal was not written: %w", seed.Name, err)}
	}
	return finishRecovery(ctx, c, rep, j)
}

// resumeRecovery continues a recovery whose seed already holds the cluster:
// restoring again would lose the writes the seed took since.
func resumeRecovery(ctx context.Context, c *cluster.Cluster, rep *Report, j *recoveryJournal, d runDeps) error {
	rep.Action = "resume"
	rep.Seed, rep.RestoredFrom, rep.FreshBackup = j.Seed, j.RestoredFrom, j.FreshBackup
	c.Progress.Say("resuming the recovery of %s: %s (%s) holds the cluster on its own; it is not restored again (that would lose the writes it took since)",
		j.SeededAt.Format(time.RFC3339), j.Seed, j.origin())
	if j.Reseeding {
		// The rebuild stops every member.
		if err := d.proven(ctx, c, "rebuilding seed "+j.Seed); err != nil {
			return err
		}
		if err := rebuildSeed(ctx, c, j); err != nil {
			return err
		}
	}
	return finishRecovery(ctx, c, rep, j)
}

// finishRecovery runs steps 3 and 4 of recoverFromSeed: it starts the
// seed, takes the fresh full snapshot unless the journal has one, and adds
// each other member that is not a voting member of the seed's cluster yet.
// It removes the journal once all were added.
func finishRecovery(ctx context.Context, c *cluster.Cluster, rep *Report, j *recoveryJournal) error {
	seed, ok := c.Spec.Member(j.Seed)
	if !ok {
		return fmt.Errorf("seed %s is not in the spec", j.Seed)
	}
	if err := membership.Start(ctx, c, seed.Name); err != nil {
		return err
	}
	if err := status.WaitMemberHealthy(ctx, c, seed.Name, 2*time.Minute); err != nil {
		return fmt.Errorf("seed %s does not become healthy: %w", seed.Name, err)
	}
	if j.FreshBackup == "" {
		full, err := backupd.Now(ctx, c, backupd.Options{Member: seed.Name})
		if err != nil {
			return &RerunError{Err: fmt.Errorf("seed %s serves, but the fresh full snapshot failed: %w", seed.Name, err), Before: "the other members were not added yet"}
		}
		c.Progress.Say("fresh full snapshot %s of the seed (revision %d)", full.ID, full.EndRevision)
		j.FreshBackup = full.ID
		if err := writeRecoveryJournal(ctx, c, j); err != nil {
			return err
		}
	}
	rep.FreshBackup = j.FreshBackup
	cli, err := c.Client(seed.ClientURL)
	if err != nil {
		return err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list the members of %s: %w", seed.Name, err)
	}
	var failed []string
	var errs []error
	// With three members or more, the members added beside the seed stay
	// on private client URLs until enough of them vote that each can
	// restart on its own URL without stopping the cluster: none serves a
	// client as a learner. (Two members cannot: the second keeps its URL.)
	private := len(c.Spec.Members) >= 3
	for _, mem := range c.Spec.Members {
		if mem.Name == seed.Name || isVoter(list.Members, mem.PeerURL) {
			continue
		}
		c.Progress.Say("adding %s as a learner; it receives the restored data from %s", mem.Name, seed.Name)
		ac, err := c.RuntimeFor(mem)
		if err == nil {
			// Stopped by Recover; but after a crash its agent may have
			// started it again, with data of the old cluster.
			if _, err = ac.Stop(ctx, mem.Name); memberrt.IsNotFound(err) {
				err = nil
			}
		}
		if err == nil {
			if private {
				err = membership.RejoinPrivate(ctx, c, cli, ac, mem, 10*time.Minute)
			} else {
				err = membership.Rejoin(ctx, c, cli, ac, mem, 10*time.Minute)
			}
		}
		if err != nil {
			failed = append(failed, mem.Name)
			errs = append(errs, fmt.Errorf("add %s: %w", mem.Name, err))
			continue
		}
		rep.Added = append(rep.Added, mem.Name)
	}
	if private {
		// Every voter on its client URL, one at a time (those of an
		// interrupted earlier run too), once three vote.
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := cli.MemberList(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list the members of %s: %w", seed.Name, err)
		}
		voters := 0
		for _, em := range list.Members {
			if !em.IsLearner {
				voters++
			}
		}
		for _, mem := range c.Spec.Members {
			if voters < 3 {
				break
			}
			if mem.Name == seed.Name || !isVoter(list.Members, mem.PeerURL) {
				continue
			}
			if err := membership.ServeClients(ctx, c, mem); err != nil {
				return &RerunError{Err: fmt.Errorf("the cluster is back (%s), but %s could not move to its client URL %s: %w", seed.Name, mem.Name, mem.ClientURL, err)}
			}
		}
	}
	if len(failed) > 0 {
		return &RerunError{Err: fmt.Errorf("the cluster is back (%s, %s; added %v), but %d members could not be added: %w",
			seed.Name, j.origin(), rep.Added, len(failed), errors.Join(errs...)), Unadded: failed}
	}
	if err := removeRecoveryJournal(ctx, c); err != nil {
		return err
	}
	rep.Message = fmt.Sprintf("%s (%s) made a cluster of one, took the fresh full snapshot %s, then added %d members as learners and promoted them; old data dirs were moved aside",
		seed.Name, j.origin(), j.FreshBackup, len(rep.Added))
	if rep.Action == "resume" {
		rep.Message = "resumed: " + rep.Message
	}
	_, err = status.WaitHealthy(ctx, c)
	return err
}

// isVoter reports whether a voting member of the list has peerURL.
func isVoter(list []*etcdserverpb.Member, peerURL string) bool {
	for _, m := range list {
		if !m.IsLearner && slices.Contains(m.PeerURLs, peerURL) {
			return true
		}
	}
	return false
}

func recoverLockPath(c *cluster.Cluster) string { return filepath.Join(c.Dir, "run", "recover.lock") }

// admitRecovery admits a recovery while no plan is open (a plan stops
// members on purpose, and recovering from a backup then would lose
// writes). The plan runner's lock and an unreadable plan store do not
// refuse: recovery is for when things are broken.
var admitRecovery = plan.Admission{SkipLock: true, IgnoreUnreadable: true, Refuse: func(p *plan.Plan) error {
	return refusal.New(ErrPlanOpen, "refusing to recover: plan %s is %s and stops members on purpose", p.ID, p.State)
}}

// heldError is the refusal of a recovery while another process of this
// directory holds recover.lock; it wraps filelock.ErrHeld (the automatic
// loop takes it as a wait, not a failure).
type heldError string

func (e heldError) Error() string {
	return fmt.Sprintf("another steward process is recovering this cluster (%s is held); wait for it to finish", string(e))
}

func (heldError) Unwrap() error { return filelock.ErrHeld }

// Running reports whether a recovery of c's directory runs now: another
// process (or goroutine) holds recover.lock. It takes the lock for an
// instant when it is free, so a recovery starting at that moment waits a
// round (a wait, not a failure). The operator asks it before it changes
// membership itself: a recovery re-adding members owns membership until it
// is done.
func Running(c *cluster.Cluster) (bool, error) {
	lock, err := filelock.TryLock(recoverLockPath(c))
	if errors.Is(err, filelock.ErrHeld) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	lock.Release()
	return false, nil
}
