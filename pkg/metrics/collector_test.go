package metrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// fixedStatus: three members, two on agent "a" (etcd-1 leads, etcd-2 is
// 7 entries behind with NOSPACE raised), etcd-3 on agent "b" and down.
func fixedStatus() *status.Status {
	return &status.Status{
		Cluster: status.ClusterStatus{Name: "prod", ID: "c1", Leader: "etcd-1", LeaderID: "11", Quorate: true, VotingMembers: 3},
		Members: []status.MemberStatus{
			{Name: "etcd-1", ID: "11", Agent: "a", InSpec: true, Role: "leader", Healthy: true,
				DBSize: 4096, DBSizeInUse: 2048, Revision: 120, RaftAppliedIndex: 500},
			{Name: "etcd-2", ID: "12", Agent: "a", InSpec: true, Role: "follower", OnlyAlarms: true, Alarms: []string{"NOSPACE"},
				DBSize: 8192, DBSizeInUse: 8000, Revision: 118, RaftAppliedIndex: 493},
			{Name: "etcd-3", ID: "13", Agent: "b", InSpec: true, Role: "unknown"},
		},
	}
}

func registry(t *testing.T, agent string, snap func() Snapshot, now func() time.Time) (*Collector, *prometheus.Registry) {
	t.Helper()
	c := NewCollector(agent, func(context.Context) Snapshot { return snap() }, slog.New(slog.DiscardHandler))
	c.now = now
	reg := prometheus.NewRegistry()
	if err := prometheus.WrapRegistererWith(prometheus.Labels{"cluster": "prod", "agent": agent}, reg).Register(c); err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestCollectorMembersAndCluster: an agent exports its own members only
// (up, role, sizes, lag against the leader, alarms), and the cluster as it
// sees it; a member that does not answer has no sizes or lag.
func TestCollectorMembersAndCluster(t *testing.T) {
	_, reg := registry(t, "a", func() Snapshot { return Snapshot{Status: fixedStatus()} }, func() time.Time { return t0 })
	want := `
# HELP steward_member_up 1 when the member answers its status and serves a linearizable read (a raised alarm does not count against it), else 0.
# TYPE steward_member_up gauge
steward_member_up{agent="a",cluster="prod",member="etcd-1"} 1
steward_member_up{agent="a",cluster="prod",member="etcd-2"} 1
# HELP steward_member_applied_index_lag Raft entries the leader has applied that the member has not (leader's applied index minus the member's).
# TYPE steward_member_applied_index_lag gauge
steward_member_applied_index_lag{agent="a",cluster="prod",member="etcd-1"} 0
steward_member_applied_index_lag{agent="a",cluster="prod",member="etcd-2"} 7
# HELP steward_member_db_size_bytes Size of the member's backend database file.
# TYPE steward_member_db_size_bytes gauge
steward_member_db_size_bytes{agent="a",cluster="prod",member="etcd-1"} 4096
steward_member_db_size_bytes{agent="a",cluster="prod",member="etcd-2"} 8192
# HELP steward_member_alarm 1 when etcd has raised the alarm (NOSPACE, CORRUPT) on the member, else 0.
# TYPE steward_member_alarm gauge
steward_member_alarm{agent="a",alarm="CORRUPT",cluster="prod",member="etcd-1"} 0
steward_member_alarm{agent="a",alarm="CORRUPT",cluster="prod",member="etcd-2"} 0
steward_member_alarm{agent="a",alarm="NOSPACE",cluster="prod",member="etcd-1"} 0
steward_member_alarm{agent="a",alarm="NOSPACE",cluster="prod",member="etcd-2"} 1
# HELP steward_member_role 1 for the member's current role (leader, follower, learner, unknown), 0 for the others.
# TYPE steward_member_role gauge
steward_member_role{agent="a",cluster="prod",member="etcd-1",role="follower"} 0
steward_member_role{agent="a",cluster="prod",member="etcd-1",role="leader"} 1
steward_member_role{agent="a",cluster="prod",member="etcd-1",role="learner"} 0
steward_member_role{agent="a",cluster="prod",member="etcd-1",role="unknown"} 0
steward_member_role{agent="a",cluster="prod",member="etcd-2",role="follower"} 1
steward_member_role{agent="a",cluster="prod",member="etcd-2",role="leader"} 0
steward_member_role{agent="a",cluster="prod",member="etcd-2",role="learner"} 0
steward_member_role{agent="a",cluster="prod",member="etcd-2",role="unknown"} 0
# HELP steward_cluster_quorate 1 when a linearizable read through a voting member succeeded, as this agent sees the cluster.
# TYPE steward_cluster_quorate gauge
steward_cluster_quorate{agent="a",cluster="prod"} 1
# HELP steward_cluster_voting_members Voting members in etcd's member list.
# TYPE steward_cluster_voting_members gauge
steward_cluster_voting_members{agent="a",cluster="prod"} 3
# HELP steward_cluster_healthy_voting_members Voting members of the spec that are healthy.
# TYPE steward_cluster_healthy_voting_members gauge
steward_cluster_healthy_voting_members{agent="a",cluster="prod"} 1
# HELP steward_cluster_revision Newest revision a member reports.
# TYPE steward_cluster_revision gauge
steward_cluster_revision{agent="a",cluster="prod"} 120
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"steward_member_up", "steward_member_applied_index_lag", "steward_member_db_size_bytes", "steward_member_alarm",
		"steward_member_role", "steward_cluster_quorate", "steward_cluster_voting_members",
		"steward_cluster_healthy_voting_members", "steward_cluster_revision"); err != nil {
		t.Error(err)
	}

	// Agent b: its one member is down (no size, no lag), and nothing of a.
	_, regB := registry(t, "b", func() Snapshot { return Snapshot{Status: fixedStatus()} }, func() time.Time { return t0 })
	want = `
# HELP steward_member_up 1 when the member answers its status and serves a linearizable read (a raised alarm does not count against it), else 0.
# TYPE steward_member_up gauge
steward_member_up{agent="b",cluster="prod",member="etcd-3"} 0
`
	if err := testutil.GatherAndCompare(regB, strings.NewReader(want), "steward_member_up", "steward_member_db_size_bytes", "steward_member_applied_index_lag"); err != nil {
		t.Error(err)
	}
}

// TestCollectorAttached: an agent watching an attached cluster (members
// under no agent) reports every member.
func TestCollectorAttached(t *testing.T) {
	st := fixedStatus()
	for i := range st.Members {
		st.Members[i].Agent = status.External
	}
	_, reg := registry(t, "local", func() Snapshot { return Snapshot{Status: st} }, func() time.Time { return t0 })
	want := `
# HELP steward_member_up 1 when the member answers its status and serves a linearizable read (a raised alarm does not count against it), else 0.
# TYPE steward_member_up gauge
steward_member_up{agent="local",cluster="prod",member="etcd-1"} 1
steward_member_up{agent="local",cluster="prod",member="etcd-2"} 1
steward_member_up{agent="local",cluster="prod",member="etcd-3"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "steward_member_up"); err != nil {
		t.Error(err)
	}
}

// TestCollectorNoClusterView: without a spec or with no member answering,
// the agent exports no cluster series (an agent that sees nothing must
// not say quorum is lost), but its members' up series still say 0.
func TestCollectorNoClusterView(t *testing.T) {
	st := fixedStatus()
	st.Cluster = status.ClusterStatus{Name: "prod"}
	for i := range st.Members {
		st.Members[i].Healthy, st.Members[i].OnlyAlarms = false, false
	}
	_, reg := registry(t, "a", func() Snapshot { return Snapshot{Status: st} }, func() time.Time { return t0 })
	n, err := testutil.GatherAndCount(reg, "steward_cluster_quorate", "steward_cluster_voting_members", "steward_cluster_leader_changes_total")
	if err != nil || n != 0 {
		t.Errorf("cluster series without a view: %d (%v), want none", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "steward_member_up"); err != nil || n != 2 {
		t.Errorf("member_up series: %d (%v), want 2", n, err)
	}
	_, empty := registry(t, "a", func() Snapshot { return Snapshot{} }, func() time.Time { return t0 })
	if n, err := testutil.GatherAndCount(empty); err != nil || n != 0 {
		t.Errorf("series without a spec: %d (%v), want none", n, err)
	}
}

// TestCollectorLeaderChanges: the counter counts changes of the leader's
// ID between scrapes, not scrapes, and not a scrape without a leader.
func TestCollectorLeaderChanges(t *testing.T) {
	leaders := []string{"11", "11", "", "12", "11"}
	i := 0
	_, reg := registry(t, "a", func() Snapshot {
		st := fixedStatus()
		st.Cluster.LeaderID = leaders[i]
		return Snapshot{Status: st}
	}, func() time.Time { return t0 })
	var got float64
	for i = range leaders {
		got = testutil.ToFloat64(onlyMetric(t, reg, "steward_cluster_leader_changes_total"))
	}
	if got != 2 {
		t.Errorf("leader changes %v, want 2 (11 -> 12 -> 11)", got)
	}
}

// onlyMetric gathers reg and returns the single series named name as a
// collector testutil.ToFloat64 reads.
func onlyMetric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return v })
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}

// TestCollectorBackup: only the backup leader exports backup series; ages
// come from the loop's report; the revision lag is the cluster's revision
// minus the newest stored one; the delta lag is how long the store has been
// behind a revision this agent saw; the full is overdue past its schedule.
func TestCollectorBackup(t *testing.T) {
	now := t0
	loop := backup.LoopStatus{Agent: "a", Role: "leader", Recording: true, NextRevision: 101,
		LastFull: t0.Add(-90 * time.Minute), LastDelta: t0.Add(-3 * time.Second)}
	rev := int64(120)
	_, reg := registry(t, "a", func() Snapshot {
		st := fixedStatus()
		st.Members[0].Revision = rev
		return Snapshot{Status: st, Loop: &loop, FullSchedule: "0 * * * *", RecoveryPointGoal: 250 * time.Millisecond}
	}, func() time.Time { return now })
	want := `
# HELP steward_backup_last_full_age_seconds Seconds since the newest full snapshot of the cluster was taken (exported by the backup leader).
# TYPE steward_backup_last_full_age_seconds gauge
steward_backup_last_full_age_seconds{agent="a",cluster="prod"} 5400
# HELP steward_backup_last_delta_age_seconds Seconds since the newest delta segment was stored (exported by the backup leader).
# TYPE steward_backup_last_delta_age_seconds gauge
steward_backup_last_delta_age_seconds{agent="a",cluster="prod"} 3
# HELP steward_backup_full_overdue_seconds Seconds past the time backup.fullSchedule wanted the next full snapshot after the newest one; 0 until then.
# TYPE steward_backup_full_overdue_seconds gauge
steward_backup_full_overdue_seconds{agent="a",cluster="prod"} 3600
# HELP steward_backup_newest_revision Newest revision stored in the backup store (full snapshot or delta segment).
# TYPE steward_backup_newest_revision gauge
steward_backup_newest_revision{agent="a",cluster="prod"} 100
# HELP steward_backup_revision_lag Revisions the cluster has that the backup store does not (cluster revision minus the newest backed-up revision).
# TYPE steward_backup_revision_lag gauge
steward_backup_revision_lag{agent="a",cluster="prod"} 20
# HELP steward_backup_recovery_point_goal_seconds The recovery point goal: backup.deltaMaxAgeMs, the longest a change waits before its delta segment is stored.
# TYPE steward_backup_recovery_point_goal_seconds gauge
steward_backup_recovery_point_goal_seconds{agent="a",cluster="prod"} 0.25
# HELP steward_backup_recording 1 while the backup leader's recorder watches and stores every change, else 0.
# TYPE steward_backup_recording gauge
steward_backup_recording{agent="a",cluster="prod"} 1
`
	names := []string{"steward_backup_last_full_age_seconds", "steward_backup_last_delta_age_seconds", "steward_backup_full_overdue_seconds",
		"steward_backup_newest_revision", "steward_backup_revision_lag", "steward_backup_recovery_point_goal_seconds", "steward_backup_recording"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	delta := func() float64 { return testutil.ToFloat64(onlyMetric(t, reg, "steward_backup_delta_lag_seconds")) }
	// First seen behind at t0 (the gather above): 10 s later, still
	// behind, the lag is 10 s; the cluster moving on does not reset it.
	now, rev = t0.Add(10*time.Second), 130
	if got := delta(); got != 10 {
		t.Errorf("delta lag %v, want 10", got)
	}
	// The store catches up with what was seen at t0 but not at t0+10s.
	now, loop.NextRevision = t0.Add(15*time.Second), 121
	if got := delta(); got != 5 {
		t.Errorf("delta lag after a partial catch-up %v, want 5", got)
	}
	now, loop.NextRevision = t0.Add(20*time.Second), 131
	if got := delta(); got != 0 {
		t.Errorf("delta lag caught up %v, want 0", got)
	}

	// A standby (no loop report passed) exports no backup series.
	_, standby := registry(t, "b", func() Snapshot { return Snapshot{Status: fixedStatus()} }, func() time.Time { return now })
	if n, err := testutil.GatherAndCount(standby, names...); err != nil || n != 0 {
		t.Errorf("backup series of a standby: %d (%v), want none", n, err)
	}
}

// TestCollectorPlanAndCertificates: the latest plan's state, step and
// steps; each certificate file's expiry, read from real PEM files.
func TestCollectorPlanAndCertificates(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "prod", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	certs := Certificates(dir)
	var names []string
	for _, c := range certs {
		names = append(names, c.Name)
		if c.NotAfter.Before(time.Now().Add(300 * 24 * time.Hour)) {
			t.Errorf("certificate %s expires %v: want about a year ahead (the default leaf lifetime)", c.Name, c.NotAfter)
		}
	}
	if got := strings.Join(names, ","); got != "ca,client,peer,server" {
		t.Errorf("certificates %s, want ca,client,peer,server", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.crt"), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := len(Certificates(dir)); got != 4 {
		t.Errorf("%d certificates with an unreadable file, want it left out (4)", got)
	}

	p := &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: plan.Failed, Steps: []plan.Step{
		{State: plan.Done}, {State: plan.Failed}, {State: plan.Pending}}}
	_, reg := registry(t, "a", func() Snapshot {
		return Snapshot{Plan: p, Certificates: []Certificate{{Name: "server", NotAfter: time.Unix(1900000000, 0)}}}
	}, func() time.Time { return t0 })
	want := `
# HELP steward_plan_state 1 for the latest upgrade or rollback plan's state, 0 for the other states (exported where the plans live: the coordinator's directory).
# TYPE steward_plan_state gauge
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="aborted"} 0
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="done"} 0
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="failed"} 1
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="pending"} 0
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="rolled back"} 0
steward_plan_state{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1",state="running"} 0
# HELP steward_plan_step Index of the latest plan's current step (the first not done); the step count when every step is done.
# TYPE steward_plan_step gauge
steward_plan_step{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1"} 1
# HELP steward_plan_steps Steps of the latest plan.
# TYPE steward_plan_steps gauge
steward_plan_steps{agent="a",cluster="prod",kind="upgrade",plan="upgrade-1"} 3
# HELP steward_certificate_expiry_timestamp_seconds When the certificate expires (Unix time).
# TYPE steward_certificate_expiry_timestamp_seconds gauge
steward_certificate_expiry_timestamp_seconds{agent="a",certificate="server",cluster="prod"} 1.9e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "steward_plan_state", "steward_plan_step", "steward_plan_steps",
		"steward_certificate_expiry_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

// TestCollectorRenewal: the certificate renewal loop's series follow the
// status' certificateRenewal, and are absent where status has none (TLS
// off, an attached cluster).
func TestCollectorRenewal(t *testing.T) {
	hb := time.Unix(1800000000, 0)
	for _, tt := range []struct {
		name    string
		renewal *status.RenewalStatus
		want    string
	}{
		{name: "running", renewal: &status.RenewalStatus{Running: true, RenewalState: status.RenewalState{PID: 7, Heartbeat: hb}}, want: `
# HELP steward_certificate_renewal_heartbeat_timestamp_seconds When the certificate renewal loop last reported (Unix time).
# TYPE steward_certificate_renewal_heartbeat_timestamp_seconds gauge
steward_certificate_renewal_heartbeat_timestamp_seconds{agent="a",cluster="prod"} 1.8e+09
# HELP steward_certificate_renewal_running 1 while this directory's certificate renewal loop runs (alive, not stopped, heartbeat fresh), 0 otherwise.
# TYPE steward_certificate_renewal_running gauge
steward_certificate_renewal_running{agent="a",cluster="prod"} 1
`},
		{name: "gone", renewal: &status.RenewalStatus{RenewalState: status.RenewalState{PID: 7, Heartbeat: hb}}, want: `
# HELP steward_certificate_renewal_heartbeat_timestamp_seconds When the certificate renewal loop last reported (Unix time).
# TYPE steward_certificate_renewal_heartbeat_timestamp_seconds gauge
steward_certificate_renewal_heartbeat_timestamp_seconds{agent="a",cluster="prod"} 1.8e+09
# HELP steward_certificate_renewal_running 1 while this directory's certificate renewal loop runs (alive, not stopped, heartbeat fresh), 0 otherwise.
# TYPE steward_certificate_renewal_running gauge
steward_certificate_renewal_running{agent="a",cluster="prod"} 0
`},
		{name: "never reported", renewal: &status.RenewalStatus{}, want: `
# HELP steward_certificate_renewal_running 1 while this directory's certificate renewal loop runs (alive, not stopped, heartbeat fresh), 0 otherwise.
# TYPE steward_certificate_renewal_running gauge
steward_certificate_renewal_running{agent="a",cluster="prod"} 0
`},
		{name: "no renewal in status", want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := fixedStatus()
			st.CertificateRenewal = tt.renewal
			_, reg := registry(t, "a", func() Snapshot { return Snapshot{Status: st} }, func() time.Time { return t0 })
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want),
				"steward_certificate_renewal_running", "steward_certificate_renewal_heartbeat_timestamp_seconds"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestEventCounters: the counters every registry exports, with the
// registry's cluster and agent labels, and names that pass promlint.
func TestEventCounters(t *testing.T) {
	col := NewCollector("a", func(context.Context) Snapshot {
		return Snapshot{Status: fixedStatus(), RecoveryCounts: []recoverycount.Counts{{Recorder: "0123456789abcdef"}}}
	}, slog.New(slog.DiscardHandler))
	reg, err := NewRegistry("prod", "a", col)
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(backupUploadedBytes.WithLabelValues(KindDelta))
	BackupUploaded(KindDelta, 1000)
	BackupUploaded(KindDelta, -5) // never decreases
	if got := testutil.ToFloat64(backupUploadedBytes.WithLabelValues(KindDelta)) - before; got != 1000 {
		t.Errorf("uploaded bytes grew by %v, want 1000", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "steward_") {
			continue
		}
		found[mf.GetName()] = true
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] != "prod" || labels["agent"] != "a" {
				t.Errorf("%s %v: want cluster=prod agent=a", mf.GetName(), labels)
			}
		}
	}
	for _, n := range []string{"steward_backup_uploaded_bytes_total", "steward_backup_failures_total", "steward_recovery_actions_total", "steward_member_up"} {
		if !found[n] {
			t.Errorf("%s not exported", n)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "steward_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// TestServerTLS: on a non-loopback address the metrics are served over
// TLS with the server certificate the cluster CA issued, which a client
// trusting only that CA accepts.
func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "prod", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	conf, err := ServingTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	col := NewCollector("a", func(context.Context) Snapshot {
		return Snapshot{Status: fixedStatus(), RecoveryCounts: []recoverycount.Counts{{Recorder: "0123456789abcdef"}}}
	}, slog.New(slog.DiscardHandler))
	reg, err := NewRegistry("prod", "a", col)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Server(reg, conf, slog.New(slog.DiscardHandler))
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+l.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `steward_member_up{agent="a",cluster="prod",member="etcd-1"} 1`) {
		t.Errorf("GET /metrics over TLS: %s\n%s", resp.Status, body)
	}
	if _, err := ServingTLS(t.TempDir()); err == nil || !strings.Contains(err.Error(), "metrics TLS certificate") {
		t.Errorf("no certificate: %v, want an error naming the metrics TLS certificate", err)
	}
}

// httpGetBody returns the body of a 200 response to GET u.
func httpGetBody(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return string(b), err
}

// TestCollectorRecoveryActions: steward_recovery_actions_total is read
// at each scrape from the files (recoveryCounts): on the acting agent the
// automatic recovery's state file, every action, reason and result from
// 0 under its recorder, the recorded counts, the same after the agent
// restarts (a new collector: the counter never goes backwards) and
// counting recoveries another process of the directory recorded (the
// coordinator's `certs renew --watch`); a state file that cannot be read
// leaves the series out rather than reporting 0; an agent of one host
// that does not act exports none; a host's agent of a multi-host cluster
// exports the counts its coordinator pushed, each recorder apart.
func TestCollectorRecoveryActions(t *testing.T) {
	dir := t.TempDir()
	one := &cluster.Cluster{Dir: dir, Spec: &spec.Cluster{Name: "prod", Agents: []spec.Agent{{Name: "a"}, {Name: "b"}}}}
	snapOf := func(c *cluster.Cluster, agent string) func() Snapshot {
		return func() Snapshot {
			rc, bad := recoveryCounts(c, c.Dir, agent, slog.New(slog.DiscardHandler))
			return Snapshot{Status: fixedStatus(), RecoveryCounts: rc, RecoveryCountsUnreadable: bad}
		}
	}
	type series struct{ recorder, action, reason, result string }
	values := func(reg *prometheus.Registry) map[series]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[series]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "steward_recovery_actions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				out[series{l["recorder"], l["action"], l["reason"], l["result"]}] = m.GetCounter().GetValue()
			}
		}
		return out
	}
	all := len(recoveryActionNames) * len(recoveryReasons) * len(recoveryResults)
	_, reg := registry(t, "a", snapOf(one, "a"), func() time.Time { return t0 })
	if n := testutil.CollectAndCount(reg, "steward_recovery_actions_total"); n != 0 {
		t.Errorf("no state file: %d series, want none (no recorder yet)", n)
	}
	// The automatic recovery's first round gives the file its recorder:
	// every action, reason and result from 0.
	st := &status.AutoRecoveryState{Decision: "none"}
	st.EnsureRecorder()
	id := st.Recorder
	if err := status.WriteAutoRecovery(dir, st); err != nil {
		t.Fatal(err)
	}
	v := values(reg)
	if len(v) != all || v[series{id, "restore", status.ReasonQuorumLost, "success"}] != 0 {
		t.Errorf("a recorder, no count: %v, want %d series of 0", v, all)
	}

	// Another process of the directory (the coordinator's `certs renew
	// --watch`) restores once, successfully.
	st.CountAction("restore", status.ReasonQuorumLost, "success")
	if err := status.WriteAutoRecovery(dir, st); err != nil {
		t.Fatal(err)
	}
	if v := values(reg)[series{id, "restore", status.ReasonQuorumLost, "success"}]; v != 1 {
		t.Errorf("after a restore recorded by another process: %v, want 1", v)
	}
	// The agent restarts: a new collector reads the same count.
	_, reg = registry(t, "a", snapOf(one, "a"), func() time.Time { return t0 })
	if v := values(reg)[series{id, "restore", status.ReasonQuorumLost, "success"}]; v != 1 {
		t.Errorf("after the agent restarted: %v, want 1 (a counter never goes backwards)", v)
	}
	st.CountAction("restore", status.ReasonQuorumLost, "success")
	st.CountAction("resume", status.ReasonUnfinished, "failure")
	st.Actions = append(st.Actions, status.AutoRecoveryCount{Action: "reseed", Result: "success", Count: 3}) // recorded before reasons were
	if err := status.WriteAutoRecovery(dir, st); err != nil {
		t.Fatal(err)
	}
	v = values(reg)
	for _, c := range []struct {
		s    series
		want float64
	}{
		{series{id, "restore", status.ReasonQuorumLost, "success"}, 2},
		{series{id, "resume", status.ReasonUnfinished, "failure"}, 1},
		{series{id, "reseed", status.ReasonQuorumLost, "success"}, 0},
		{series{id, "reseed", "unknown", "success"}, 3},
	} {
		if v[c.s] != c.want {
			t.Errorf("%+v: %v, want %v", c.s, v[c.s], c.want)
		}
	}
	// An agent that does not act for the directory exports none.
	_, other := registry(t, "b", snapOf(one, "b"), func() time.Time { return t0 })
	if n := testutil.CollectAndCount(other, "steward_recovery_actions_total"); n != 0 {
		t.Errorf("an agent that does not act: %d series, want none", n)
	}
	// Damaged: left out, not 0.
	if err := os.WriteFile(status.AutoRecoveryStatePath(dir), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "steward_recovery_actions_total"); n != 0 {
		t.Errorf("unreadable state file: %d series, want none", n)
	}

	// A host's agent of a multi-host cluster (no admin certificate in
	// its directory): the counts its coordinator pushed, of two
	// recorders (a coordinator that took over counts under its own).
	hostDir := t.TempDir()
	host := &cluster.Cluster{Dir: hostDir, Spec: &spec.Cluster{Name: "prod",
		Agents: []spec.Agent{{Name: "h1", Host: "10.0.0.1", Port: 9443}, {Name: "h2", Host: "10.0.0.2", Port: 9443}}}}
	_, hreg := registry(t, "h1", snapOf(host, "h1"), func() time.Time { return t0 })
	if n := testutil.CollectAndCount(hreg, "steward_recovery_actions_total"); n != 0 {
		t.Errorf("a host that received no counts: %d series, want none", n)
	}
	old, next := "00000000000000aa", "00000000000000bb"
	if err := recoverycount.Write(hostDir, &recoverycount.Received{Recorders: []recoverycount.Counts{
		{Recorder: old, Actions: []recoverycount.Count{{Action: "reseed", Reason: status.ReasonQuorumLost, Result: "success", Count: 1}}},
		{Recorder: next, Actions: []recoverycount.Count{{Action: "resume", Reason: status.ReasonUnfinished, Result: "success", Count: 1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	v = values(hreg)
	if len(v) != 2*all || v[series{old, "reseed", status.ReasonQuorumLost, "success"}] != 1 || v[series{next, "resume", status.ReasonUnfinished, "success"}] != 1 ||
		v[series{next, "reseed", status.ReasonQuorumLost, "success"}] != 0 {
		t.Errorf("a host's pushed counts: %v", v)
	}
	if err := os.WriteFile(recoverycount.Path(hostDir), []byte(`{"recorders":[{"recorder":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(hreg, "steward_recovery_actions_total"); n != 0 {
		t.Errorf("a damaged pushed counts file: %d series, want none", n)
	}
}
