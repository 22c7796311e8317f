package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/spec"
)

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// Backup is a backup ID or "latest".
	Backup string
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
	// Force moves existing data dirs aside instead of refusing.
	Force bool
	// BumpRevision is added to the restored revision so that no client
	// ever sees a revision go backwards; the old range is marked compacted.
	BumpRevision uint64
	// ToRevision restores the keyspace as it was at this revision (0: the
	// newest backed-up revision).
	ToRevision int64
	// ToTime restores the keyspace as it was at this time (zero: newest).
	ToTime time.Time
	// AllowOtherCluster restores a backup taken from another etcd cluster
	// than the one last seen for this spec.
	AllowOtherCluster bool
	// Members restricts the restore to these members' data dirs (empty:
	// every member). The others' data dirs are left as they are. Each
	// restored member still records the whole spec as its initial cluster,
	// so member and cluster IDs are those of a full restore.
	Members []string
}

// DefaultBumpRevision is large enough for any write rate between a backup
// and the disaster (a billion writes), and far from int64's limit.
const DefaultBumpRevision = 1_000_000_000

// Restore builds a data dir for every member of the spec from a full
// backup, with the revision bumped and the old range marked compacted so
// watchers get a compaction error and re-list instead of missing changes.
// The cluster must be stopped. Existing data dirs are refused unless Force,
// and then moved aside, never deleted. Every member is restored into a new
// directory first; only when all succeeded are they moved into place.
func (c *Cluster) Restore(ctx context.Context, o RestoreOptions) (backup.Manifest, error) {
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
	if err := c.requireStopped(ctx); err != nil {
		return backup.Manifest{}, err
	}
	store, err := c.BackupStore()
	if err != nil {
		return backup.Manifest{}, err
	}
	m, chain, err := pickChain(ctx, store, o)
	if err != nil {
		return backup.Manifest{}, err
	}
	if known := c.knownClusterID(); known != "" && m.ClusterID != known && !o.AllowOtherCluster {
		return m, fmt.Errorf("refusing to restore: backup %s is from etcd cluster %s, but this spec's cluster is %s; use --allow-other-cluster to build this cluster from it anyway",
			m.ID, m.ClusterID, known)
	}
	var occupied []string
	for _, mem := range targets {
		dd := spec.Path(c.Dir, mem.DataDir)
		if datadir.RequireEmpty(dd) != nil {
			occupied = append(occupied, dd)
		}
	}
	if len(occupied) > 0 && !o.Force {
		return m, fmt.Errorf("refusing to restore: data dirs hold data: %v; use --force to move them aside (they are kept, not deleted)", occupied)
	}
	key, err := c.backupKey(o.KeyFile)
	if err != nil {
		return m, err
	}
	tmp, err := os.MkdirTemp(c.Dir, "tmp-restore-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(tmp)
	snap := filepath.Join(tmp, "snapshot.db")
	c.Progress.Say("fetching and verifying %s (revision %d)", m.ID, m.EndRevision)
	if err := backup.Fetch(ctx, store, m, key, snap); err != nil {
		return m, err
	}
	// Fetch checked etcd's appended SHA-256; it goes now, since the
	// database is written to below (deltas, revision bump).
	if err := backup.StripChecksum(snap); err != nil {
		return m, err
	}
	restoredRev := m.EndRevision
	if len(chain.Deltas) > 0 {
		c.Progress.Say("replaying %d delta segments (revisions %d to %d)", len(chain.Deltas), m.EndRevision+1, chain.End)
		restoredRev, err = backup.Apply(ctx, store, key, snap, m.EndRevision, chain.Deltas,
			backup.ApplyOptions{ToRevision: o.ToRevision, ToTime: o.ToTime})
		if err != nil {
			return m, err
		}
	}
	if o.ToRevision > 0 && restoredRev != o.ToRevision {
		return m, fmt.Errorf("revision %d is outside the backed-up range: the chain from %s reaches revision %d", o.ToRevision, m.ID, restoredRev)
	}
	if o.BumpRevision == 0 {
		o.BumpRevision = DefaultBumpRevision
	}
	// Bumped once in the shared snapshot, not by etcd's restore per member
	// (which reads the whole database to find the newest revision).
	bumped, err := backup.BumpRevision(snap, int64(o.BumpRevision))
	if err != nil {
		return m, err
	}
	stamp := time.Now().UTC().Format("20060102T150405.000Z")
	staged := map[string]string{}
	cleanup := func() {
		for _, d := range staged {
			_ = os.RemoveAll(d) // our own staging output, never user data
		}
	}
	initial := c.Spec.InitialCluster()
	for _, mem := range targets {
		dd := spec.Path(c.Dir, mem.DataDir)
		if err := os.MkdirAll(filepath.Dir(dd), 0o700); err != nil {
			cleanup()
			return m, err
		}
		out := dd + ".restoring-" + stamp
		staged[mem.Name] = out
		c.Progress.Say("writing a new data dir for %s (revision %d)", mem.Name, restoredRev)
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath: snap, Name: mem.Name, OutputDataDir: out,
			PeerURLs: []string{mem.PeerURL}, InitialCluster: initial, InitialClusterToken: c.Spec.Token,
			SkipHashCheck: true, // checked by Fetch, then stripped
		})
		if err != nil {
			cleanup()
			return m, fmt.Errorf("restore member %s: %w", mem.Name, err)
		}
		if err := os.Chmod(out, 0o700); err != nil {
			cleanup()
			return m, err
		}
		c.Progress.Say("restored %s into a new data dir", mem.Name)
	}
	for _, mem := range targets {
		dd := spec.Path(c.Dir, mem.DataDir)
		aside, err := datadir.MoveAside(dd, "pre-restore")
		if err != nil {
			return m, fmt.Errorf("move data dir of %s aside: %w (restored data waits in %s)", mem.Name, err, staged[mem.Name])
		}
		if aside != "" {
			c.Progress.Say("moved old data dir of %s to %s", mem.Name, aside)
		}
		if err := os.Rename(staged[mem.Name], dd); err != nil {
			return m, fmt.Errorf("put restored data dir of %s in place: %w (it waits in %s)", mem.Name, err, staged[mem.Name])
		}
		delete(staged, mem.Name)
	}
	// Every restored member is now an initial member of the restored cluster.
	next := c.Spec.Clone()
	for i := range next.Members {
		if slices.ContainsFunc(targets, func(t spec.Member) bool { return t.Name == next.Members[i].Name }) {
			next.Members[i].Bootstrap = nil
		}
	}
	if err := c.SaveSpec(next); err != nil {
		return m, err
	}
	then := "start the cluster with `steward up`"
	if len(targets) < len(c.Spec.Members) {
		then = "the other members' data dirs were left as they are"
	}
	c.Progress.Say("restored %d members from %s and %d deltas at revision %d (etcd resumes above revision %d; older ones are marked compacted); %s",
		len(targets), m.ID, len(chain.Deltas), restoredRev, bumped, then)
	return m, nil
}

// requireStopped fails when any member still runs.
func (c *Cluster) requireStopped(ctx context.Context) error {
	for _, a := range c.Spec.Agents {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return err
		}
		ms, err := ac.Members(ctx)
		if errors.Is(err, agentapi.ErrUnreachable) {
			continue
		}
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.PID != 0 || m.State == agentapi.StateRunning || m.State == agentapi.StateStarting {
				return fmt.Errorf("refusing to restore while member %s is running: stop the cluster first (`steward down`)", m.Name)
			}
		}
	}
	// A member left running by a dead agent: any process on its data dir.
	for _, m := range c.Spec.Members {
		dd := spec.Path(c.Dir, m.DataDir)
		if pid := processOnDataDir(dd); pid != 0 {
			return fmt.Errorf("refusing to restore: process %d still runs member %s on %s: stop the cluster first (`steward down`)", pid, m.Name, dd)
		}
	}
	return nil
}

// pickChain chooses the full backup and the deltas to restore: the named
// backup (or the newest full one) with every delta after it; or, with
// --to-revision or --to-time, the newest full backup at or before the target.
// A gap in the chain that later deltas would have filled is refused rather
// than silently dropping them.
func pickChain(ctx context.Context, store backup.Store, o RestoreOptions) (backup.Manifest, backup.Chain, error) {
	all, err := backup.List(ctx, store)
	if err != nil {
		return backup.Manifest{}, backup.Chain{}, err
	}
	var full backup.Manifest
	switch {
	case o.Backup != "" && o.Backup != "latest":
		if full, err = backup.Find(ctx, store, o.Backup); err != nil {
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
			if (o.ToRevision > 0 && m.EndRevision <= o.ToRevision) || (!o.ToTime.IsZero() && !m.CreatedAt.After(o.ToTime)) {
				full, found = m, true
			}
		}
		if !found {
			return full, backup.Chain{}, fmt.Errorf("no full backup at or before the target in %s: the oldest restorable point is the first full backup", store)
		}
	default:
		if full, err = backup.Find(ctx, store, "latest"); err != nil {
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
		return full, chain, fmt.Errorf("the delta chain after %s has a gap: revisions %d to %d are missing, and %d delta segments after the gap would be lost; restore up to the gap explicitly with --to-revision %d",
			full.ID, chain.End+1, chain.GapAfter[0].StartRevision-1, len(chain.GapAfter), chain.End)
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
