// Package backupd takes the cluster's backups: a verified full snapshot on
// demand (Now), and the continuous loop each agent runs (Run): the backup
// leader's election in etcd, the recorder that streams every change into
// delta segments, the full snapshots on schedule, and the status it
// reports for the BackupReady condition.
package backupd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/metrics"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/status"
)

// report is the loop's state, as written to its status file for
// BackupReady. The loop goroutine, the monitor goroutine of a round and
// the recorder's upload callback all update it, so every access goes
// through its methods.
type report struct {
	statusDir string
	log       *slog.Logger

	mu sync.Mutex
	st backup.LoopStatus // guarded by mu
}

// update changes the state under the lock and, when write, writes it.
func (r *report) update(write bool, f func(st *backup.LoopStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.st)
	if write {
		r.writeLocked()
	}
}

// write writes the current state.
func (r *report) write() { r.update(true, func(*backup.LoopStatus) {}) }

func (r *report) writeLocked() {
	if err := backup.WriteLoopStatus(r.statusDir, r.st); err != nil {
		r.log.Warn("write the backup loop status", "err", err)
	}
}

// Run runs the continuous backup loop of one agent until
// ctx ends. Exactly one agent acts at a time: the one that runs the etcd
// leader and holds the backup election in etcd (so a new leader starts only
// after the previous one stored its last segment). It continues the chain
// from the newest revision in the store (last revision + 1), so a handover
// leaves no gap and no overlap (restore still trims an overlap, should a
// fenced-off leader's last upload land late). It takes a full snapshot when
// none exists for the cluster, on the schedule, when the delta chain grows
// past its limit, and when the watch reports the needed revision compacted.
func Run(ctx context.Context, dir, agentName string, log *slog.Logger) {
	r := &report{statusDir: filepath.Join(dir, "status"), log: log, st: backup.LoopStatus{Agent: agentName}}
	failures := 0
	for ctx.Err() == nil {
		err := round(ctx, dir, agentName, r, log)
		switch {
		case ctx.Err() != nil:
			r.write()
			return
		case errors.Is(err, errNotBackupLeader), errors.Is(err, errBackupsOff):
			failures = 0
			r.update(false, func(st *backup.LoopStatus) { st.Recording = false })
			sleepCtx(ctx, 2*time.Second)
		case err != nil:
			failures++
			metrics.BackupFailed()
			r.update(true, func(st *backup.LoopStatus) { st.LastError, st.LastErrorAt = err.Error(), time.Now().UTC() })
			log.Warn("continuous backup", "err", err)
			// Retry soon: every second without a recorder widens the
			// recovery point (the next round resumes where the store ends).
			sleepCtx(ctx, min(time.Duration(failures)*300*time.Millisecond, 5*time.Second))
		default:
			failures = 0
		}
	}
}

var (
	errNotBackupLeader = errors.New("not the backup leader")
	errBackupsOff      = errors.New("continuous backups are off")
)

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// round is one stretch of leadership: it returns when leadership moves, a
// full snapshot is due, or something fails. Every goroutine it starts has
// ended when it returns.
func round(ctx context.Context, dir, agentName string, r *report, log *slog.Logger) error {
	c, err := cluster.Open(dir)
	if errors.Is(err, cluster.ErrNoSpec) {
		// A host whose coordinator has not handed the spec over yet.
		return errBackupsOff
	}
	if err != nil {
		return err
	}
	if !c.Spec.Backup.Continuous {
		return errBackupsOff
	}
	// The live members only (etcd and the agents), not a whole status:
	// every standby agent asks every 2 s, and the conditions (the backup
	// store's listing, a handshake with every member for its certificate)
	// are nothing a round reads.
	seen, err := status.LiveMembers(ctx, c)
	if err != nil {
		return err
	}
	leader, ok := seen.Member(seen.Cluster.Leader)
	if !ok || !seen.Cluster.Quorate {
		return fmt.Errorf("no leader: %s", seen.Unhealthy())
	}
	if !backsUp(c, leader, agentName) {
		r.update(false, func(st *backup.LoopStatus) {
			if st.Role != "standby" {
				st.Role = "standby"
				r.writeLocked()
			}
		})
		return errNotBackupLeader
	}
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	// Exclusion: the previous backup leader's recorder must have stopped
	// (and stored its last segment) before this one reads where the chain
	// ends, or the two would record the same revisions.
	lease, err := campaignBackupLeader(ctx, cli, agentName, log)
	if err != nil {
		return err
	}
	defer lease.release()
	if handOver(ctx, c, cli, leader, agentName) {
		return nil // leadership moved while waiting: the next round decides
	}
	r.update(false, func(st *backup.LoopStatus) { st.Role = "leader" })
	store, err := c.BackupStore(ctx)
	if err != nil {
		return err
	}
	key, err := c.BackupKey("")
	if err != nil {
		return err
	}
	auth, err := c.BackupAuthKey()
	if err != nil {
		return err
	}
	listing, err := backup.List(ctx, store, backup.ListOptions{Key: auth})
	if err != nil {
		return err
	}
	// The cluster's revision read after the listing: a previous leader may
	// have stored its last segment since the status above (a hand-over under
	// writes), and a manifest is judged against what the cluster had when
	// it was listed, not before.
	live := liveRevision(seen)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	if resp, err := cli.Get(rctx, "/steward/revision", clientv3.WithCountOnly()); err == nil {
		live = max(live, resp.Header.Revision)
	}
	rcancel()
	all, ignored := trusted(listing, seen.Cluster.ID, live, time.Now())
	if len(ignored) > 0 {
		log.Warn("ignoring untrusted backup manifests", "count", len(ignored), "manifests", ignored)
	}
	r.update(false, func(st *backup.LoopStatus) { st.Ignored = ignored })
	sched, err := cron.ParseStandard(c.Spec.Backup.FullSchedule)
	if err != nil {
		return err
	}
	// lastFull starts the chain the recorder continues; lastSnapshot, the
	// newest full backup streamed from a member (not folded from a chain by
	// a compaction), is what the schedule counts from: compaction bounds
	// restore time, the schedule keeps fresh snapshots of the cluster itself.
	// Only the current timeline's backups continue a chain: a restore
	// began a new timeline, whose first backup is a full snapshot.
	timeline := c.Lineage()
	mine := ownChains(all, seen.Cluster.ID, timeline.TimelineID())
	var lastFull, lastSnapshot *backup.Manifest
	next := int64(0)
	deltasSinceFull := 0 // guarded by r.mu once the recorder runs
	var chainBytes int64 // stored bytes of those deltas; guarded by r.mu like deltasSinceFull
	for i := range mine {
		m := mine[i]
		if m.Kind == backup.KindFull && (lastFull == nil || m.EndRevision >= lastFull.EndRevision) {
			lastFull = &mine[i]
		}
		if m.Kind == backup.KindFull && m.CompactedFrom == "" && (lastSnapshot == nil || m.CreatedAt.After(lastSnapshot.CreatedAt)) {
			lastSnapshot = &mine[i]
		}
		if m.EndRevision+1 > next {
			next = m.EndRevision + 1
		}
	}
	r.update(false, func(st *backup.LoopStatus) {
		for _, m := range mine {
			// LastFull is what the schedule counts from: the newest
			// snapshot of a member, not a compaction (LastCompaction).
			if m.Kind == backup.KindFull && m.CompactedFrom == "" && m.CreatedAt.After(st.LastFull) {
				st.LastFull = m.CreatedAt
			} else if m.Kind != backup.KindFull && m.CreatedAt.After(st.LastDelta) {
				st.LastDelta = m.CreatedAt
			}
		}
	})
	if lastFull != nil {
		ch := backup.BuildChain(all, *lastFull)
		deltasSinceFull, chainBytes = len(ch.Deltas), backup.ChainBytes(ch)
		if ch.End+1 < next {
			// A gap after this full (a failed recorder): start a new chain.
			lastFull = nil
		}
	}
	if lastSnapshot == nil {
		lastSnapshot = lastFull
	}
	fullDue := lastFull == nil || deltasSinceFull >= c.Spec.Backup.MaxDeltasPerFull ||
		!sched.Next(lastSnapshot.CreatedAt).After(time.Now())
	if fullDue {
		m, err := Now(ctx, c, Options{Member: leader.Name})
		if err != nil {
			return fmt.Errorf("full snapshot: %w", err)
		}
		log.Info("full snapshot", "id", m.ID, "revision", m.EndRevision)
		metrics.BackupUploaded(metrics.KindFull, m.Size)
		if res, err := restore.Collect(ctx, c, false); err != nil {
			log.Warn("backup garbage collection", "err", err)
		} else if len(res.Deleted) > 0 {
			log.Info("backup garbage collection", "deleted", len(res.Deleted), "kept", len(res.Kept))
		}
		r.update(true, func(st *backup.LoopStatus) {
			st.LastFull, st.LastUpload, st.NextRevision = m.CreatedAt, m.CreatedAt, m.EndRevision+1
		})
		lastFull, lastSnapshot, next, deltasSinceFull, chainBytes = &m, &m, m.EndRevision+1, 0, 0
	}

	// Watch until leadership moves, the next full is due, or the chain is long.
	rctx, cancel := context.WithDeadline(ctx, sched.Next(lastSnapshot.CreatedAt))
	defer cancel()
	monitorDone := make(chan struct{})
	// The chain's compaction runs beside the recorder, from the store alone.
	comp := &compactor{c: c, log: log, r: r, fence: lease.fence, full: lastFull.ID, bounds: Bounds(c),
		folded: func(deltas int, bytes int64) { deltasSinceFull -= deltas; chainBytes -= bytes }}
	// Runs before cli.Close and lease.release.
	defer func() { cancel(); <-monitorDone; comp.wait() }()
	go func() {
		defer close(monitorDone)
		lastReport := time.Now()
		var samples []revSample
		for rctx.Err() == nil {
			select {
			case <-rctx.Done():
				return
			case <-lease.sess.Done():
				cancel() // the election lease is lost: stop at once
				return
			case <-time.After(500 * time.Millisecond):
			}
			if handOver(rctx, c, cli, leader, agentName) {
				cancel() // another agent's member leads: hand over
				return
			}
			if time.Since(lastReport) >= 2*time.Second {
				samples = sampleRevision(rctx, cli, leader, samples)
				behind := behindRevision(samples, time.Now())
				r.update(true, func(st *backup.LoopStatus) { st.BehindRevision = behind })
				lastReport = time.Now()
			}
		}
	}()
	if comp.bounds.Reached(deltasSinceFull, chainBytes) {
		comp.start(rctx)
	}
	rec := backup.NewRecorder(backup.RecorderOptions{
		Fence: lease.fence,
		Store: store, Key: key, Auth: auth, ClusterID: seen.Cluster.ID, EtcdVersion: leader.Version, Member: leader.Name,
		Lineage: timeline,
		MaxAge:  time.Duration(c.Spec.Backup.DeltaMaxAgeMs) * time.Millisecond,
		OnUpload: func(m backup.Manifest) {
			metrics.BackupUploaded(metrics.KindDelta, m.Size)
			chainFull, compactDue := false, false
			r.update(true, func(st *backup.LoopStatus) {
				st.LastUpload, st.NextRevision, st.LastError = m.CreatedAt, m.EndRevision+1, ""
				st.LastDelta = m.CreatedAt
				deltasSinceFull++ // guarded by r.mu like the status
				chainBytes += m.Size
				chainFull = deltasSinceFull >= c.Spec.Backup.MaxDeltasPerFull
				compactDue = comp.bounds.Reached(deltasSinceFull, chainBytes)
			})
			if chainFull {
				cancel()
			} else if compactDue {
				comp.start(rctx)
			}
		},
	}, next)
	r.update(true, func(st *backup.LoopStatus) { st.NextRevision, st.Recording, st.LastError = next, true, "" })
	err = rec.Run(rctx, cli)
	r.update(false, func(st *backup.LoopStatus) { st.Recording = false })
	if errors.Is(err, backup.ErrCompacted) {
		// The next round finds no usable chain end and takes a full snapshot.
		log.Warn("watch compacted; taking a full snapshot", "err", err)
		m, ferr := Now(ctx, c, Options{Member: leader.Name})
		if ferr != nil {
			return fmt.Errorf("full snapshot after compaction: %w", ferr)
		}
		metrics.BackupUploaded(metrics.KindFull, m.Size)
		return nil
	}
	if rctx.Err() != nil && ctx.Err() == nil {
		return nil // handover, schedule or chain limit: next round
	}
	return err
}

// revSample is the cluster's revision at a time.
type revSample struct {
	at  time.Time
	rev int64
}

// lagWindow is how long a write may wait to be stored before the loop
// reports that it is not keeping up.
const lagWindow = 6 * time.Second

// sampleRevision appends the leader's current revision (when it answers)
// and drops samples older than needed.
func sampleRevision(ctx context.Context, cli *clientv3.Client, leader status.MemberStatus, samples []revSample) []revSample {
	if len(leader.ClientURLs) == 0 {
		return samples
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	resp, err := cli.Status(sctx, leader.ClientURLs[0])
	cancel()
	if err != nil || status.CheckAnswer(leader.Name, leader.MemberID(), leader.ClientURLs[0], resp) != nil {
		return samples
	}
	now := time.Now()
	samples = append(samples, revSample{now, resp.Header.Revision})
	// Keep the newest sample older than the window, and those after it.
	for len(samples) > 1 && now.Sub(samples[1].at) >= lagWindow {
		samples = samples[1:]
	}
	return samples
}

// behindRevision is the revision the cluster had reached lagWindow ago (0
// when no sample is that old): every revision up to it should be stored.
func behindRevision(samples []revSample, now time.Time) int64 {
	if len(samples) == 0 || now.Sub(samples[0].at) < lagWindow {
		return 0
	}
	return samples[0].rev
}

// liveRevision is the newest revision a healthy member reports.
func liveRevision(st *status.Status) int64 {
	var rev int64
	for _, m := range st.Members {
		if m.Healthy {
			rev = max(rev, m.Revision)
		}
	}
	return rev
}

// ownChains keeps the backups the loop may continue: of this cluster, on
// its current timeline (a restore began a new one: its first backup is a
// full snapshot, never a delta after another timeline's chain).
func ownChains(all []backup.Manifest, clusterID string, timeline int64) []backup.Manifest {
	var out []backup.Manifest
	for _, m := range all {
		if m.ClusterID == clusterID && m.TimelineID() == timeline {
			out = append(out, m)
		}
	}
	return out
}

// trusted keeps the authenticated manifests of this cluster that the live
// cluster makes possible: none claims a revision above the cluster's
// (liveRev) or a creation time in the future. The rest, with the manifests
// List ignored, are named in the second result; the loop never continues a
// chain from them.
func trusted(l backup.Listing, clusterID string, liveRev int64, now time.Time) ([]backup.Manifest, []string) {
	var ignored []string
	for _, i := range l.Ignored {
		ignored = append(ignored, i.String())
	}
	var out []backup.Manifest
	for _, m := range l.Backups {
		switch {
		case m.ClusterID != clusterID:
			out = append(out, m) // another cluster's: not used, not judged
		case liveRev > 0 && m.EndRevision > liveRev:
			ignored = append(ignored, fmt.Sprintf("%s: claims revision %d, but the cluster is at revision %d", m.ID, m.EndRevision, liveRev))
		case m.CreatedAt.After(now.Add(time.Minute)):
			ignored = append(ignored, fmt.Sprintf("%s: created in the future (%s)", m.ID, m.CreatedAt.Format(time.RFC3339)))
		default:
			out = append(out, m)
		}
	}
	return out, ignored
}

// backupElection is the etcd election that makes one agent at a time the
// backup leader. Its keys (one per campaigning agent, each on a lease of
// backupLeaseTTL seconds) are the only keys Steward writes into the
// cluster's keyspace.
const (
	backupElection = "/steward/backup-leader"
	backupLeaseTTL = 10
)

// backupLease is held by the backup leader for one round.
type backupLease struct {
	sess *concurrency.Session
	el   *concurrency.Election
}

// campaignBackupLeader waits until this agent holds the backup election.
// The previous holder releases it when its round ends (after storing its
// last segment), or its lease expires backupLeaseTTL seconds after its agent
// stopped renewing it.
func campaignBackupLeader(ctx context.Context, cli *clientv3.Client, agentName string, log *slog.Logger) (*backupLease, error) {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(backupLeaseTTL))
	if err != nil {
		return nil, fmt.Errorf("backup election: %w", err)
	}
	if err := dropStaleCampaigns(ctx, cli, agentName, sess.Lease(), log); err != nil {
		_ = sess.Close()
		return nil, err
	}
	el := concurrency.NewElection(sess, backupElection)
	cctx, cancel := context.WithTimeout(ctx, 3*backupLeaseTTL*time.Second)
	defer cancel()
	if err := el.Campaign(cctx, agentName); err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("backup election: another agent still holds it: %w", err)
	}
	return &backupLease{sess: sess, el: el}, nil
}

// dropStaleCampaigns revokes the election leases that an earlier process of
// this same agent left behind: after a crash or kill of the agent, or in a
// keyspace restored from a backup (the old campaign key is restored with its
// lease, which etcd renews for a whole TTL). Waiting for them to expire
// would hold continuous backups back by up to backupLeaseTTL seconds.
//
// Invariant that makes this safe: a key whose value is this agent's name
// was written by a process that held this agent's lock (DIR/run/agent.lock),
// which this process holds now; so that process is gone and records nothing
// more. Keys of other agents are left to expire or be resigned.
func dropStaleCampaigns(ctx context.Context, cli *clientv3.Client, agentName string, mine clientv3.LeaseID, log *slog.Logger) error {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, backupElection+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("backup election: list campaigns: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != agentName || kv.Lease == 0 || clientv3.LeaseID(kv.Lease) == mine {
			continue
		}
		if _, err := cli.Revoke(gctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("backup election: revoke the stale campaign %s of an earlier process of agent %s: %w", kv.Key, agentName, err)
		}
		log.Info("revoked the stale backup election key of an earlier process of this agent", "key", string(kv.Key), "lease", fmt.Sprintf("%x", kv.Lease))
	}
	return nil
}

// errLeaseLost fences a recorder whose election lease expired: another
// agent may already record, so nothing more is stored.
var errLeaseLost = errors.New("backup election lease lost: not storing any more segments")

// fence is checked before each segment is stored.
func (l *backupLease) fence() error {
	select {
	case <-l.sess.Done():
		return errLeaseLost
	default:
		return nil
	}
}

// release resigns and revokes the lease, so the next leader starts at once.
func (l *backupLease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.el.Resign(ctx)
	_ = l.sess.Close()
}

// backsUp reports whether this agent may campaign to back up while leader
// leads etcd: the agent that runs the leader (its snapshot and watch stay
// on its host); for an attached cluster, whose members no agent runs,
// every agent of the spec, and the election picks one.
func backsUp(c *cluster.Cluster, leader status.MemberStatus, agentName string) bool {
	if c.Spec.IsExternal() {
		_, ok := c.Spec.Agent(agentName)
		return ok
	}
	return leader.Agent == agentName
}

// handOver reports whether another agent's member now leads etcd. It asks
// the member this round records from first (cheap), and the whole cluster
// only when that member says it no longer leads.
func handOver(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, leader status.MemberStatus, agentName string) bool {
	if len(leader.ClientURLs) > 0 {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := cli.Status(sctx, leader.ClientURLs[0])
		cancel()
		// Only the member itself may say it still leads: another member
		// on its URL (an alias, a reused port) would speak for itself.
		if err == nil && r.Leader == r.Header.MemberId && status.CheckAnswer(leader.Name, leader.MemberID(), leader.ClientURLs[0], r) == nil {
			return false
		}
	}
	s, err := status.LiveMembers(ctx, c)
	if err != nil || s.Cluster.Leader == "" || s.Cluster.Leader == leader.Name {
		return false
	}
	m, ok := s.Member(s.Cluster.Leader)
	return ok && m.Agent != agentName
}
