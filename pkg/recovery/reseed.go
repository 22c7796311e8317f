package recovery

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/isolated"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
)

// A reseed (a survivor's own data seeds the cluster) changes history as a
// restore does: the lost majority may have served revisions the seed
// never applied, and a client that read them must not see those numbers
// again. So the seed is rebuilt by a restore from its own database
// (restore.Options.FromMember): etcd resumes above every revision the
// cluster ever served (the seed's, every backup's, every timeline's, plus
// restore's margin, computed by pkg/restore), on a new timeline recorded
// in the store and the spec, with the cluster and member IDs kept and the
// old data dir moved aside. The rebuilt data dir has a fresh raft log, so
// the members added after it receive a raft snapshot from the seed, never
// a replay of entries older than the bump (bumping the seed's database in
// place let learners replay the old log into empty stores and serve
// revision 6 beside a seed at 1,000,000,005).
//
// The steps, each safe to repeat after a crash:
//
//  1. the seed runs alone with --force-new-cluster until a write commits,
//     so etcd applies every entry its WAL committed to its database (and
//     the seed is a cluster of one: the recovery journal is written, with
//     Reseeding set, and from now on a re-run resumes here);
//  2. restore from the seed's database into the seed (the journal's
//     FromTimeline tells whether this step committed: the spec's timeline
//     changed);
//  3. the rebuilt seed runs alone with --force-new-cluster (its data dir
//     names the whole spec as its initial cluster, as a restore's does);
//     the journal then clears Reseeding, and the recovery goes on as one
//     from a backup does (finishRecovery).
//
// While Reseeding is set, the seed has served no client since step 1 (it
// ran only on private client ports), so repeating step 2 loses nothing.

// reseed runs step 1 and, under the journal, steps 2 and 3.
func reseed(ctx context.Context, c *cluster.Cluster, seed spec.Member) (*recoveryJournal, error) {
	c.Progress.Say("%s: running it alone with --force-new-cluster on a private client port until a write commits, so its database holds every entry its WAL committed", seed.Name)
	if err := isolated.Run(ctx, c, []string{seed.Name}, c.Spec.VersionOf(seed), isolated.Options{ForceNewCluster: true, Timeout: 2 * time.Minute}); err != nil {
		return nil, fmt.Errorf("make %s a cluster of one: %w (its data is kept: re-run the recovery)", seed.Name, err)
	}
	j := &recoveryJournal{Seed: seed.Name, SeededAt: time.Now().UTC(), Reseeding: true, FromTimeline: c.Spec.TimelineID()}
	if err := writeRecoveryJournal(ctx, c, j); err != nil {
		return nil, fmt.Errorf("%s is a cluster of one, but the recovery journal was not written: %w (re-run the recovery)", seed.Name, err)
	}
	return j, rebuildSeed(ctx, c, j)
}

// rebuildSeed runs steps 2 and 3 for a journal with Reseeding set, and
// clears it.
func rebuildSeed(ctx context.Context, c *cluster.Cluster, j *recoveryJournal) error {
	seed, ok := c.Spec.Member(j.Seed)
	if !ok {
		return fmt.Errorf("seed %s is not in the spec", j.Seed)
	}
	// A restore needs every member stopped (an agent may have started one
	// since the recovery stopped them).
	for _, m := range c.Spec.Members {
		if err := membership.Stop(ctx, c, m.Name, true); err != nil && !memberrt.IsNotFound(err) {
			return fmt.Errorf("stop %s: %w", m.Name, err)
		}
	}
	if c.Spec.TimelineID() == j.FromTimeline {
		c.Progress.Say("rebuilding %s from its own database above every revision the cluster served, on a new timeline", seed.Name)
		if _, err := restore.Run(ctx, c, restore.Options{FromMember: seed.Name, Force: true, Members: []string{seed.Name}}); err != nil {
			return fmt.Errorf("rebuild %s from its own database: %w (re-run the recovery: it resumes from %s)", seed.Name, err, seed.Name)
		}
		crashpoint.Hit(crashpoint.RecoverReseedRebuilt)
	}
	c.Progress.Say("%s: running its rebuilt data dir alone with --force-new-cluster until a write commits", seed.Name)
	if err := isolated.Run(ctx, c, []string{seed.Name}, c.Spec.VersionOf(*seed), isolated.Options{ForceNewCluster: true, Timeout: 2 * time.Minute}); err != nil {
		return fmt.Errorf("make the rebuilt %s a cluster of one: %w (re-run the recovery: it resumes from %s)", seed.Name, err, seed.Name)
	}
	j.Reseeding, j.Timeline = false, c.Spec.TimelineID()
	return writeRecoveryJournal(ctx, c, j)
}
