package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/status"
)

// Snapshot is what one scrape reads: everything but the event counters.
type Snapshot struct {
	// Status is a status probe of the cluster; nil when there is no spec
	// or the probe failed.
	Status *status.Status
	// Loop is this agent's backup loop report when it leads backups; nil
	// otherwise (only the backup leader exports backup gauges).
	Loop *backup.LoopStatus
	// FullSchedule and RecoveryPointGoal are the spec's backup.fullSchedule
	// and backup.deltaMaxAgeMs.
	FullSchedule      string
	RecoveryPointGoal time.Duration
	// Plan is the latest upgrade or rollback plan of this directory; nil
	// when it holds none (a host's directory never does: plans live on
	// the coordinator).
	Plan *plan.Plan
	// Certificates are the certificates this agent and its members use.
	Certificates []Certificate
	// RecoveryCounts are the automatic recovery's counts this agent
	// exports as steward_recovery_actions_total, one entry per recording
	// directory: its own directory's (status/autorecovery.json) when it
	// acts for it (cluster.AutoRecoveryActor: on one host the first
	// agent, on several hosts the coordinator's agent), or on a host of
	// a multi-host cluster those its coordinator pushed
	// (status/recovery-counts.json: every host's agent exports them, so
	// the alerts take the max over agents). Nil: none exported.
	RecoveryCounts []recoverycount.Counts
	// RecoveryCountsUnreadable: the counts' file cannot be read
	// (damaged): the counter is left out for the scrape rather than
	// exported as 0, which would read as a reset.
	RecoveryCountsUnreadable bool
}

// Certificate is one certificate file and when it expires.
type Certificate struct {
	// Name is the file's name without ".crt" (ca, server, peer, client, agent).
	Name     string
	NotAfter time.Time
}

// recoveryActionNames are the actions recovery.Report names; each is
// exported with both results from the start (0), so rate() and increase()
// see the first recovery.
var recoveryActionNames = []string{"none", "restart", "reseed", "restore", "resume"}

// recoveryResults are the results of a finished recovery.
var recoveryResults = []string{"success", "failure"}

// recoveryReasons are the reasons a recovery runs for (status.Reason*).
var recoveryReasons = []string{status.ReasonQuorumLost, status.ReasonUnfinished}

// unknownReason is the reason label of counts recorded before reasons
// were (their Reason is empty).
const unknownReason = "unknown"

// Roles a member can have, each exported as a 0/1 series.
var roles = []string{"leader", "follower", "learner", "unknown"}

// Alarms etcd raises, each exported as a 0/1 series.
var alarms = []string{"NOSPACE", "CORRUPT"}

// planStates are the states of a plan, each exported as a 0/1 series.
var planStates = []plan.State{plan.Pending, plan.Running, plan.Done, plan.Failed, plan.RolledBack, plan.Aborted}

var (
	descMemberUp = prometheus.NewDesc("steward_member_up",
		"1 when the member answers its status and serves a linearizable read (a raised alarm does not count against it), else 0.", []string{"member"}, nil)
	descMemberRole = prometheus.NewDesc("steward_member_role",
		"1 for the member's current role (leader, follower, learner, unknown), 0 for the others.", []string{"member", "role"}, nil)
	descDBSize = prometheus.NewDesc("steward_member_db_size_bytes",
		"Size of the member's backend database file.", []string{"member"}, nil)
	descDBInUse = prometheus.NewDesc("steward_member_db_size_in_use_bytes",
		"Bytes of the member's backend database in use (the rest is free pages a defragmentation returns).", []string{"member"}, nil)
	descAppliedLag = prometheus.NewDesc("steward_member_applied_index_lag",
		"Raft entries the leader has applied that the member has not (leader's applied index minus the member's).", []string{"member"}, nil)
	descAlarm = prometheus.NewDesc("steward_member_alarm",
		"1 when etcd has raised the alarm (NOSPACE, CORRUPT) on the member, else 0.", []string{"member", "alarm"}, nil)

	descQuorate = prometheus.NewDesc("steward_cluster_quorate",
		"1 when a linearizable read through a voting member succeeded, as this agent sees the cluster.", nil, nil)
	descVoting = prometheus.NewDesc("steward_cluster_voting_members",
		"Voting members in etcd's member list.", nil, nil)
	descHealthyVoting = prometheus.NewDesc("steward_cluster_healthy_voting_members",
		"Voting members of the spec that are healthy.", nil, nil)
	descClusterRevision = prometheus.NewDesc("steward_cluster_revision",
		"Newest revision a member reports.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("steward_cluster_leader_changes_total",
		"Changes of the etcd leader this agent observed between its scrapes.", nil, nil)

	descLastFullAge = prometheus.NewDesc("steward_backup_last_full_age_seconds",
		"Seconds since the newest full snapshot of the cluster was taken (exported by the backup leader).", nil, nil)
	descLastDeltaAge = prometheus.NewDesc("steward_backup_last_delta_age_seconds",
		"Seconds since the newest delta segment was stored (exported by the backup leader).", nil, nil)
	descFullOverdue = prometheus.NewDesc("steward_backup_full_overdue_seconds",
		"Seconds past the time backup.fullSchedule wanted the next full snapshot after the newest one; 0 until then.", nil, nil)
	descNewestRevision = prometheus.NewDesc("steward_backup_newest_revision",
		"Newest revision stored in the backup store (full snapshot or delta segment).", nil, nil)
	descRevisionLag = prometheus.NewDesc("steward_backup_revision_lag",
		"Revisions the cluster has that the backup store does not (cluster revision minus the newest backed-up revision).", nil, nil)
	descDeltaLag = prometheus.NewDesc("steward_backup_delta_lag_seconds",
		"How long the backup store has been behind the cluster: seconds since this agent first saw a cluster revision the store still lacks (scrape resolution); 0 when caught up.", nil, nil)
	descRPO = prometheus.NewDesc("steward_backup_recovery_point_goal_seconds",
		"The recovery point goal: backup.deltaMaxAgeMs, the longest a change waits before its delta segment is stored.", nil, nil)
	descRecording = prometheus.NewDesc("steward_backup_recording",
		"1 while the backup leader's recorder watches and stores every change, else 0.", nil, nil)

	descPlanState = prometheus.NewDesc("steward_plan_state",
		"1 for the latest upgrade or rollback plan's state, 0 for the other states (exported where the plans live: the coordinator's directory).", []string{"plan", "kind", "state"}, nil)
	descPlanStep = prometheus.NewDesc("steward_plan_step",
		"Index of the latest plan's current step (the first not done); the step count when every step is done.", []string{"plan", "kind"}, nil)
	descPlanSteps = prometheus.NewDesc("steward_plan_steps",
		"Steps of the latest plan.", []string{"plan", "kind"}, nil)

	descCertExpiry = prometheus.NewDesc("steward_certificate_expiry_timestamp_seconds",
		"When the certificate expires (Unix time).", []string{"certificate"}, nil)
	descRecoveryActions = prometheus.NewDesc("steward_recovery_actions_total",
		"Automatic recoveries the recording directory (recorder) ran, by action (restart, reseed, restore, resume, none), reason (quorum-lost, unfinished-recovery) and result (success, failure); read from the recorder's DIR/status/autorecovery.json, or on a host from the counts its coordinator pushed (DIR/status/recovery-counts.json), so it never goes backwards across restarts. On several hosts every agent exports the same counts: take max without (instance, agent).", []string{"recorder", "action", "reason", "result"}, nil)

	descRenewalRunning = prometheus.NewDesc("steward_certificate_renewal_running",
		"1 while this directory's certificate renewal loop runs (alive, not stopped, heartbeat fresh), 0 otherwise.", nil, nil)
	descRenewalHeartbeat = prometheus.NewDesc("steward_certificate_renewal_heartbeat_timestamp_seconds",
		"When the certificate renewal loop last reported (Unix time).", nil, nil)
)

// Collector reads the gauges at scrape time. Several scrapes at once share
// one read (see gather).
type Collector struct {
	agent  string
	gather func(ctx context.Context) Snapshot
	now    func() time.Time
	log    *slog.Logger

	mu sync.Mutex
	// lastLeader is the leader's member ID at the previous scrape
	// (guarded by mu).
	lastLeader string
	// leaderChanges counts changes of lastLeader (guarded by mu).
	leaderChanges float64
	// behind are the cluster revisions seen at earlier scrapes that the
	// backup store did not hold yet, oldest first (guarded by mu).
	behind []seenRevision
}

// maxBehind bounds Collector.behind.
const maxBehind = 1024

type seenRevision struct {
	at  time.Time
	rev int64
}

// NewCollector returns the collector of agent, reading a Snapshot from
// gather at each scrape.
func NewCollector(agent string, gather func(ctx context.Context) Snapshot, log *slog.Logger) *Collector {
	return &Collector{agent: agent, gather: gather, now: time.Now, log: log}
}

// Describe sends nothing: the series depend on the cluster (an unchecked
// collector).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// scrapeTimeout bounds the status probe of one scrape (Prometheus' default
// scrape timeout is 10 s).
const scrapeTimeout = 8 * time.Second

// Collect reads a snapshot and sends its series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s := c.gather(ctx)
	c.emit(ch, s, c.now())
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// emit sends the series of one snapshot taken at now.
func (c *Collector) emit(ch chan<- prometheus.Metric, s Snapshot, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := s.Status; st != nil {
		c.emitCluster(ch, st)
	}
	if s.Loop != nil && s.Status != nil {
		c.emitBackup(ch, s, now)
	} else {
		c.behind = nil
	}
	if p := s.Plan; p != nil {
		for _, state := range planStates {
			gauge(ch, descPlanState, b2f(p.State == state), p.ID, string(p.Kind), string(state))
		}
		step := len(p.Steps)
		for i, st := range p.Steps {
			if st.State != plan.Done {
				step = i
				break
			}
		}
		gauge(ch, descPlanStep, float64(step), p.ID, string(p.Kind))
		gauge(ch, descPlanSteps, float64(len(p.Steps)), p.ID, string(p.Kind))
	}
	for _, cert := range s.Certificates {
		gauge(ch, descCertExpiry, float64(cert.NotAfter.Unix()), cert.Name)
	}
	if !s.RecoveryCountsUnreadable {
		for _, rc := range s.RecoveryCounts {
			emitRecoveryActions(ch, rc)
		}
	}
	if st := s.Status; st != nil && st.CertificateRenewal != nil {
		r := st.CertificateRenewal
		gauge(ch, descRenewalRunning, b2f(r.Running))
		if !r.Heartbeat.IsZero() {
			gauge(ch, descRenewalHeartbeat, float64(r.Heartbeat.Unix()))
		}
	}
}

// emitRecoveryActions sends steward_recovery_actions_total from one
// recorder's counts rc (every known action, reason and result, 0 when not
// counted). The counts live in a file, not in this process, so the
// counter survives the agent's restarts and counts the recoveries another
// process recorded.
func emitRecoveryActions(ch chan<- prometheus.Metric, rc recoverycount.Counts) {
	type key struct{ action, reason, result string }
	counts := map[key]float64{}
	for _, a := range recoveryActionNames {
		for _, why := range recoveryReasons {
			for _, r := range recoveryResults {
				counts[key{a, why, r}] = 0
			}
		}
	}
	for _, a := range rc.Actions {
		why := a.Reason
		if why == "" {
			why = unknownReason
		}
		counts[key{a.Action, why, a.Result}] += float64(max(a.Count, 0))
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(descRecoveryActions, prometheus.CounterValue, v, rc.Recorder, k.action, k.reason, k.result)
	}
}

// emitCluster sends the member series of this agent's members (of every
// member, for an attached cluster) and the
// cluster as this agent sees it. Called with c.mu held.
func (c *Collector) emitCluster(ch chan<- prometheus.Metric, st *status.Status) {
	var leaderApplied uint64
	if l, ok := st.Member(st.Cluster.Leader); ok && l.Role == "leader" {
		leaderApplied = l.RaftAppliedIndex
	}
	var revision int64
	for _, m := range st.Members {
		revision = max(revision, m.Revision)
		// An attached cluster's members run under no agent: the agents
		// that watch it (the one of `attach --continuous`) report them.
		if (m.Agent != c.agent && m.Agent != status.External) || !m.InSpec {
			continue
		}
		up := m.Healthy || m.OnlyAlarms
		gauge(ch, descMemberUp, b2f(up), m.Name)
		for _, r := range roles {
			gauge(ch, descMemberRole, b2f(m.Role == r), m.Name, r)
		}
		for _, a := range alarms {
			raised := false
			for _, have := range m.Alarms {
				raised = raised || have == a
			}
			gauge(ch, descAlarm, b2f(raised), m.Name, a)
		}
		if !up {
			continue // sizes and indexes of a member that did not answer are unknown
		}
		gauge(ch, descDBSize, float64(m.DBSize), m.Name)
		gauge(ch, descDBInUse, float64(m.DBSizeInUse), m.Name)
		if leaderApplied > 0 && m.RaftAppliedIndex > 0 {
			lag := float64(0)
			if leaderApplied > m.RaftAppliedIndex {
				lag = float64(leaderApplied - m.RaftAppliedIndex)
			}
			gauge(ch, descAppliedLag, lag, m.Name)
		}
	}
	if st.Cluster.ID == "" {
		return // no member answered this agent: it knows nothing of the cluster
	}
	gauge(ch, descQuorate, b2f(st.Cluster.Quorate))
	gauge(ch, descVoting, float64(st.Cluster.VotingMembers))
	gauge(ch, descHealthyVoting, float64(st.HealthyVoters()))
	gauge(ch, descClusterRevision, float64(revision))
	if id := st.Cluster.LeaderID; id != "" {
		if c.lastLeader != "" && c.lastLeader != id {
			c.leaderChanges++
		}
		c.lastLeader = id
	}
	ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, c.leaderChanges)
}

// emitBackup sends the backup leader's series. Called with c.mu held.
func (c *Collector) emitBackup(ch chan<- prometheus.Metric, s Snapshot, now time.Time) {
	l := s.Loop
	gauge(ch, descRecording, b2f(l.Recording))
	gauge(ch, descRPO, s.RecoveryPointGoal.Seconds())
	if !l.LastFull.IsZero() {
		gauge(ch, descLastFullAge, max(now.Sub(l.LastFull).Seconds(), 0))
		overdue := 0.0
		if sched, err := cron.ParseStandard(s.FullSchedule); err == nil {
			if due := sched.Next(l.LastFull); now.After(due) {
				overdue = now.Sub(due).Seconds()
			}
		}
		gauge(ch, descFullOverdue, overdue)
	}
	if !l.LastDelta.IsZero() {
		gauge(ch, descLastDeltaAge, max(now.Sub(l.LastDelta).Seconds(), 0))
	}
	if l.NextRevision <= 0 {
		return
	}
	newest := l.NextRevision - 1
	gauge(ch, descNewestRevision, float64(newest))
	var revision int64
	for _, m := range s.Status.Members {
		revision = max(revision, m.Revision)
	}
	if revision == 0 {
		return
	}
	gauge(ch, descRevisionLag, float64(max(revision-newest, 0)))
	// The delta lag: how long ago this agent first saw a revision the
	// store still lacks. Revisions the store now holds are dropped.
	keep := c.behind[:0]
	for _, b := range c.behind {
		if b.rev > newest {
			keep = append(keep, b)
		}
	}
	c.behind = keep
	if revision > newest && (len(c.behind) == 0 || c.behind[len(c.behind)-1].rev < revision) {
		c.behind = append(c.behind, seenRevision{at: now, rev: revision})
		if len(c.behind) > maxBehind {
			// A store that stays behind for hours: keep the oldest (the
			// lag) and the newest; the lag after a partial catch-up may
			// then read low.
			c.behind = append(c.behind[:1], c.behind[len(c.behind)-maxBehind/2:]...)
		}
	}
	lag := 0.0
	if len(c.behind) > 0 {
		lag = now.Sub(c.behind[0].at).Seconds()
	}
	gauge(ch, descDeltaLag, lag)
}
