package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/isolated"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// ReplaceOptions configure ReplaceDataDirs.
type ReplaceOptions struct {
	// Version is the etcd version the members run now: the WAL is applied
	// on it, and the new data dirs' version records say it (unless
	// BaseBackup), so the agent enforces the one-minor rule from there.
	Version string
	// BaseBackup, when set, is a full backup taken on an older version:
	// the new data dirs hold its database with the keyspace of the stopped
	// database grafted in (backup.Graft), and their version records say
	// BaseVersion. This is a rollback without etcd's online downgrade.
	BaseBackup  string
	BaseVersion string
	// Target names the new data dirs: DATADIR-vTARGET.
	Target string
	// Timeout bounds the isolated run that completes a database whose
	// member stopped between commit and apply.
	Timeout time.Duration
}

// ReplaceReport says where the data went.
type ReplaceReport struct {
	// Source is the member whose database the new data dirs hold.
	Source string `json:"source"`
	// Revision is the revision of that database.
	Revision int64 `json:"revision"`
	// Old and New map each member to its old and new data dir (HOST:DIR
	// for a member on another host, as its agent resolves DIR).
	Old map[string]string `json:"old"`
	New map[string]string `json:"new"`
}

var versionSuffix = regexp.MustCompile(`-v\d+\.\d+\.\d+$`)

// newDataDir is the data dir a replace to target gives a member: its
// current one with the version suffix of an earlier replace swapped.
func newDataDir(current, target string) string {
	return versionSuffix.ReplaceAllString(current, "") + "-v" + target
}

// ReplaceDataDirs is the heart of the replace-via-restore method: it stops
// every member, restores a fresh data dir for each from the database of
// the stopped member that applied the most, and makes the spec name the
// new dirs. The old data dirs are not touched: they stay where they are,
// whole, for a rollback. The new ones are not started.
//
// Invariant: no acknowledged write is lost. etcd acknowledges a write
// once it is in the WAL of a quorum and applied on the leader, but the
// leader may apply (and acknowledge) an entry before the hard state that
// records its commit reaches the WAL, and it commits its database in
// batches: after a kill, neither a database nor a WAL's commit index
// proves that a write is absent. So the members are killed (no client can
// write after that), then always run together on private client ports
// until a write goes through raft: the new leader's log holds every entry
// a quorum persisted, the write commits and applies them all. They stop
// gracefully (nothing is connected, so at once), which commits each
// database, and the member that applied the most is the source; as a last
// check it must have applied every entry any member's WAL committed.
//
// Across hosts: the database is prepared once, here (a source on another
// host is copied from its agent, its SHA-256 checked), and each member's
// new data dir is built on its own host by its runtime, which stages it
// beside the new dir's path and commits it there (buildOnHost): every
// member holds the same database, and no byte of an old data dir changes.
//
// Idempotent: when the spec already names the new dirs, it does nothing; a
// half-built new dir (never named by the spec, so never started) is
// rebuilt (on another host, the earlier one is moved aside, not deleted).
func ReplaceDataDirs(ctx context.Context, c *cluster.Cluster, o ReplaceOptions) (ReplaceReport, error) {
	rep := ReplaceReport{Old: map[string]string{}, New: map[string]string{}}
	done := true
	for _, m := range c.Spec.Members {
		nd := newDataDir(m.DataDir, o.Target)
		if m.DataDir != nd {
			done = false
		}
		rep.Old[m.Name], rep.New[m.Name] = spec.Path(c.Dir, m.DataDir), spec.Path(c.Dir, nd)
		if c.OnOtherHost(m) {
			// Where its host's agent resolves them (relative: to the
			// agent's directory there).
			rep.Old[m.Name], rep.New[m.Name] = m.Agent+":"+m.DataDir, m.Agent+":"+nd
		}
	}
	if done {
		c.Progress.Say("every member already has its new data dir")
		return rep, nil
	}
	names := c.Spec.MemberNames()
	for _, m := range c.Spec.Members {
		ac, err := c.RuntimeFor(m)
		if err != nil {
			return rep, err
		}
		// SIGKILL, not a graceful stop: etcd's graceful stop waits up to
		// its request timeout (7 s) for clients' watch streams, and the
		// isolated run below applies whatever the WAL holds.
		if _, err := ac.Kill(ctx, m.Name); err != nil {
			return rep, fmt.Errorf("stop member %s: %w", m.Name, err)
		}
	}
	c.Progress.Say("stopped %d members; applying their WALs on private client ports", len(names))
	if err := isolated.Run(ctx, c, names, o.Version, isolated.Options{Timeout: o.Timeout}); err != nil {
		return rep, err
	}
	source, applied, err := mostApplied(ctx, c)
	if err != nil {
		return rep, err
	}
	if source == "" {
		return rep, fmt.Errorf("no member's database holds every committed entry after replaying the WAL; nothing was replaced, the old data dirs are as they were")
	}
	src, _ := c.Spec.Member(source)
	// Held while it runs; a killed run's copy is removed under the plan
	// runner's lock when the plan ends or the next starts (plan.StepScratchPrefix).
	tmp, err := scratch.New(c.Dir, plan.StepScratchPrefix+"replace-")
	if err != nil {
		return rep, err
	}
	defer tmp.Remove()
	srcDB := filepath.Join(spec.Path(c.Dir, src.DataDir), "member", "snap", "db")
	if c.OnOtherHost(*src) {
		// Prepared once, here: every member's new data dir holds this one
		// database, whichever host it is built on.
		rt, err := c.RuntimeFor(*src)
		if err != nil {
			return rep, err
		}
		srcDB = filepath.Join(tmp.Path, "source.db")
		if err := rt.FetchDatabase(ctx, source, srcDB); err != nil {
			return rep, fmt.Errorf("copy the database of %s from host %s: %w; nothing was replaced, the old data dirs are as they were", source, src.Agent, err)
		}
		c.Progress.Say("copied the database of %s from host %s", source, src.Agent)
	}
	if rep.Revision, err = datadir.Revision(srcDB); err != nil {
		return rep, fmt.Errorf("database of %s: %w", source, err)
	}
	rep.Source = source
	snapPath, record := srcDB, o.Version
	if o.BaseBackup != "" {
		if snapPath, err = graftOntoBackup(ctx, c, o.BaseBackup, srcDB, tmp.Path); err != nil {
			return rep, err
		}
		record = o.BaseVersion
		c.Progress.Say("grafted the keyspace of %s (revision %d) onto backup %s", source, rep.Revision, o.BaseBackup)
	}
	c.Progress.Say("restoring every member from the database of %s (applied index %d, revision %d)", source, applied, rep.Revision)
	initial := c.Spec.InitialCluster()
	// The IDs the members' WALs record: the new data dirs keep them
	// (members added at run time have IDs the initial cluster does not
	// derive).
	ids, err := c.KeptIdentity(ctx, "", "", nil)
	if err != nil {
		return rep, err
	}
	for i, m := range c.Spec.Members {
		if c.OnOtherHost(m) {
			if err := buildOnHost(ctx, c, m, o.Target, snapPath, ids, record); err != nil {
				return rep, err
			}
			crashpoint.Hit(crashpoint.Indexed(crashpoint.ReplaceBuilt, i))
			continue
		}
		nd := rep.New[m.Name]
		// Not ours alone: an earlier plan may have left a data dir by this
		// name that etcd ran on (upgrade by restore to V, rollback by
		// restore, upgrade by restore to V again), or an earlier attempt
		// of this plan built it. Moved aside, never deleted, as on another
		// host (listed and pruned by `restore leftovers`).
		if aside, err := datadir.MoveAside(nd, "pre-restore"); err != nil {
			return rep, err
		} else if aside != "" {
			c.Progress.Say("moved %s's earlier %s aside to %s", m.Name, nd, aside)
		}
		staging := nd + ".restoring"
		if err := os.RemoveAll(staging); err != nil {
			return rep, err
		}
		// A member's database (or a grafted one) has no valid appended hash;
		// FromSnapshot does not check one.
		err := datadir.FromSnapshot(datadir.FromSnapshotOptions{
			Snapshot: snapPath, Name: m.Name, PeerURL: m.PeerURL,
			InitialCluster: initial, Token: c.Spec.Token, IDs: ids,
		}, staging)
		if err != nil {
			return rep, err
		}
		if err := os.Rename(staging, nd); err != nil {
			return rep, err
		}
		if err := datadir.WriteRecord(nd, record, time.Now()); err != nil {
			return rep, err
		}
		crashpoint.Hit(crashpoint.Indexed(crashpoint.ReplaceBuilt, i))
	}
	next := c.Spec.Clone()
	for i := range next.Members {
		next.Members[i].DataDir = newDataDir(next.Members[i].DataDir, o.Target)
		next.Members[i].Bootstrap = nil
	}
	if err := c.SaveSpec(ctx, next); err != nil {
		return rep, err
	}
	crashpoint.Hit(crashpoint.ReplaceSpecSaved)
	for _, m := range c.Spec.Members {
		ac, err := c.RuntimeFor(m)
		if err != nil {
			return rep, err
		}
		if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
			return rep, fmt.Errorf("give member %s its new data dir: %w", m.Name, err)
		}
	}
	c.Progress.Say("every member has a new data dir; the old ones are kept: %v", rep.Old)
	return rep, nil
}

// mostApplied returns the stopped member whose database applied the most,
// provided it applied every entry any member's WAL committed (a write is
// acknowledged only after it was committed); "" when none did. A member on
// another host is asked through its runtime.
func mostApplied(ctx context.Context, c *cluster.Cluster) (string, uint64, error) {
	best, bestApplied, maxCommitted := "", uint64(0), uint64(0)
	for _, m := range c.Spec.Members {
		var ai memberrt.AppliedIndex
		var err error
		if c.OnOtherHost(m) {
			var rt memberrt.Runtime
			if rt, err = c.RuntimeFor(m); err == nil {
				ai, err = rt.Applied(ctx, m.Name)
			}
			if err != nil {
				err = fmt.Errorf("on host %s: %w", m.Agent, err)
			}
		} else {
			ai.Applied, ai.Committed, err = datadir.Applied(spec.Path(c.Dir, m.DataDir))
		}
		if err != nil {
			return "", 0, fmt.Errorf("member %s: %w", m.Name, err)
		}
		maxCommitted = max(maxCommitted, ai.Committed)
		if best == "" || ai.Applied > bestApplied {
			best, bestApplied = m.Name, ai.Applied
		}
	}
	if bestApplied < maxCommitted {
		return "", 0, nil
	}
	return best, bestApplied, nil
}

// buildOnHost builds member m's new data dir (its data dir named for
// target) on its own host, through its runtime, from the local database
// file snapshot: the runtime is given the new dir in m's config for the
// time it stages the dir beside it and commits it in place, then the old
// config back, so the runtime's config differs from the spec's only
// while one member is built. The member is stopped (the replace killed
// it); its old data dir is not touched. A new dir an earlier attempt
// built (never started: the spec did not name it) is moved aside by the
// commit, not deleted.
func buildOnHost(ctx context.Context, c *cluster.Cluster, m spec.Member, target, snapshot string, ids *datadir.Identity, record string) error {
	rt, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	nm := m
	nm.DataDir = newDataDir(m.DataDir, target)
	nm.Bootstrap = nil
	members, cid := ids.Hex()
	to := memberrt.StageTarget{InitialCluster: c.Spec.InitialCluster(), MemberIDs: members, ClusterID: cid, Version: record}
	if _, err := rt.PutMember(ctx, c.MemberConfig(nm)); err != nil {
		return fmt.Errorf("point member %s on host %s at its new data dir: %w", m.Name, m.Agent, err)
	}
	staged, err := rt.StageDataDir(ctx, m.Name, snapshot, to)
	if err == nil {
		var aside string
		if aside, err = rt.CommitDataDir(ctx, m.Name, staged); err == nil && aside != "" {
			c.Progress.Say("moved a new data dir an earlier attempt built for %s on host %s to %s", m.Name, m.Agent, aside)
		}
	}
	// The spec still names the old dir until every member is built.
	if _, perr := rt.PutMember(ctx, c.MemberConfig(m)); err == nil && perr != nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("build the new data dir of %s on host %s: %w", m.Name, m.Agent, err)
	}
	c.Progress.Say("restored %s into a new data dir on host %s", m.Name, m.Agent)
	return nil
}

// graftOntoBackup fetches and verifies full backup id into dir, and grafts
// the keyspace of database src onto it. It returns the grafted file.
func graftOntoBackup(ctx context.Context, c *cluster.Cluster, id, src, dir string) (string, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return "", err
	}
	listing, err := c.Backups(ctx, store, false)
	if err != nil {
		return "", err
	}
	m, err := listing.Find(id, store.String())
	if err != nil {
		return "", fmt.Errorf("backup %s, taken before the upgrade, is needed to go back without etcd's online downgrade: %w", id, err)
	}
	key, err := c.BackupKey("")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "base.db")
	if err := backup.FetchDatabase(ctx, store, m, key, out); err != nil {
		return "", fmt.Errorf("fetch backup %s: %w", id, err)
	}
	if err := backup.Graft(out, src); err != nil {
		return "", err
	}
	return out, nil
}
