package status

import (
	"errors"
	"github.com/etcd-steward/steward/pkg/cluster"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func statusOf(ms ...MemberStatus) *Status {
	st := &Status{Members: ms}
	for _, m := range ms {
		if m.Role == "learner" {
			st.Cluster.Learners++
		} else {
			st.Cluster.VotingMembers++
		}
		if m.Healthy {
			st.Cluster.HealthyMembers++
			st.Cluster.Quorate = true
		}
	}
	return st
}

func TestConditions(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all := statusOf(
		MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true},
		MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true},
		MemberStatus{Name: "c", Role: "follower", Healthy: true, InSpec: true},
	)
	observe := func(st *Status, now time.Time) []Condition {
		t.Helper()
		st.Conditions = conditions(t.Context(), c, st, now)
		if err := Record(c, st, now); err != nil {
			t.Fatal(err)
		}
		return st.Conditions
	}
	// Computing conditions writes nothing; Record does.
	all.Conditions = conditions(t.Context(), c, all, t0)
	if _, err := os.Stat(conditionsPath(c)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("conditions computed without Record wrote %s (err %v)", conditionsPath(c), err)
	}
	all.Cluster.ID = "c1d"
	conds := observe(all, t0)
	if id, err := c.KnownClusterID(); err != nil || id != "c1d" {
		t.Errorf("recorded cluster ID %q (err %v), want c1d", id, err)
	}
	if conds[0].Status != "True" || conds[1].Status != "True" || conds[2].Status != "Unknown" {
		t.Fatalf("all healthy: %+v", conds)
	}
	if !strings.Contains(conds[0].Message, "3 of 3 voting members healthy; quorum is 2") {
		t.Errorf("Ready message: %s", conds[0].Message)
	}

	// One down an hour later: AllMembersReady transitions, Ready keeps its time.
	one := statusOf(
		MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true},
		MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true},
		MemberStatus{Name: "c", Role: "unknown", LastError: "connection refused", InSpec: true},
	)
	t1 := t0.Add(time.Hour)
	conds = observe(one, t1)
	if conds[0].Status != "True" || !conds[0].LastTransitionTime.Equal(t0) {
		t.Errorf("Ready with one down: %+v, want True since %s", conds[0], t0)
	}
	if conds[1].Status != "False" || conds[1].Reason != "NotAllMembersReady" || !conds[1].LastTransitionTime.Equal(t1) {
		t.Errorf("AllMembersReady with one down: %+v", conds[1])
	}
	if !strings.Contains(conds[1].Message, "c: connection refused") {
		t.Errorf("message must name the member and why: %s", conds[1].Message)
	}

	// A healthy learner is not ready until promoted.
	learning := statusOf(
		MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true},
		MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true},
		MemberStatus{Name: "c", Role: "learner", Healthy: true, InSpec: true},
	)
	conds = observe(learning, t1)
	if conds[0].Status != "True" || conds[1].Status != "False" || conds[1].Reason != "LearnerNotPromoted" || !strings.Contains(conds[1].Message, "c") {
		t.Errorf("with a healthy learner: Ready %+v, AllMembersReady %+v", conds[0], conds[1])
	}

	// Quorum lost.
	lost := statusOf(
		MemberStatus{Name: "a", Role: "unknown", InSpec: true},
		MemberStatus{Name: "b", Role: "unknown", InSpec: true},
		MemberStatus{Name: "c", Role: "unknown", InSpec: true},
	)
	conds = observe(lost, t1.Add(time.Hour))
	if conds[0].Status != "False" || conds[0].Reason != "QuorumLost" {
		t.Errorf("Ready without quorum: %+v", conds[0])
	}
}

func TestFullOverdue(t *testing.T) {
	last := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		now  time.Time
		want bool
	}{
		{last.Add(30 * time.Minute), false},
		{last.Add(90 * time.Minute), false}, // one hourly run missed: not yet
		{last.Add(2*time.Hour + time.Minute), true},
	} {
		if got := fullOverdue("0 * * * *", last, tt.now); got != tt.want {
			t.Errorf("overdue at %s = %v, want %v", tt.now, got, tt.want)
		}
	}
	if fullOverdue("0 * * * *", time.Time{}, last) {
		t.Error("no full snapshot taken by the loop yet must not be overdue")
	}
}

// TestCountRoles: a member whose own status says it is a learner counts as
// one whatever etcd's member list says or whether there is one; without
// this, a status whose member list timed out called a cluster with a
// learner healthy (TestAutoRecovery then read from the learner).
func TestCountRoles(t *testing.T) {
	voter := func(id uint64) probe {
		return probe{status: &clientv3.StatusResponse{Header: &pb.ResponseHeader{MemberId: id}}}
	}
	learner := func(id uint64) probe {
		p := voter(id)
		p.status.IsLearner = true
		return p
	}
	down := probe{err: errors.New("connection refused")}
	for _, tc := range []struct {
		name                   string
		list                   []*pb.Member
		probes                 []probe
		wantVoting, wantLearns int
	}{
		{"list agrees", []*pb.Member{{ID: 1}, {ID: 2}, {ID: 3, IsLearner: true}}, []probe{voter(1), voter(2), learner(3)}, 2, 1},
		{"list only knows the learner", []*pb.Member{{ID: 1}, {ID: 2, IsLearner: true}}, []probe{voter(1), down}, 1, 1},
		{"no list: learners from the probes", nil, []probe{voter(1), voter(2), learner(3)}, 2, 1},
		{"no list, a member down: counted a voter", nil, []probe{voter(1), down, voter(3)}, 3, 0},
		{"stale list calls a learner a voter", []*pb.Member{{ID: 1}, {ID: 2}, {ID: 3}}, []probe{voter(1), voter(2), learner(3)}, 2, 1},
		{"stale list does not know a learner", []*pb.Member{{ID: 1}, {ID: 2}}, []probe{voter(1), voter(2), learner(3)}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, l := countRoles(tc.list, tc.probes)
			if v != tc.wantVoting || l != tc.wantLearns {
				t.Errorf("countRoles = %d voting, %d learners; want %d, %d", v, l, tc.wantVoting, tc.wantLearns)
			}
		})
	}
}

// TestCatchUp: the health gate after a restart holds until the member runs
// what it should, every member is healthy, and the member applied what the
// leader had applied when it first answered (not what the leader has
// now: under writes that would never hold).
func TestCatchUp(t *testing.T) {
	st := func(version string, pid int, healthy bool, others bool, applied, leaderApplied uint64) *Status {
		s := &Status{Cluster: ClusterStatus{Leader: "m2"}}
		s.Members = []MemberStatus{
			{Name: "m1", Version: version, PID: pid, Healthy: healthy, RaftAppliedIndex: applied, LastError: "dial refused"},
			{Name: "m2", Version: "3.6.0", Healthy: true, RaftAppliedIndex: leaderApplied},
			{Name: "m3", Version: "3.6.0", Healthy: others, RaftAppliedIndex: leaderApplied},
		}
		for _, m := range s.Members {
			if m.Healthy {
				s.Cluster.HealthyMembers++
			}
		}
		return s
	}
	g := &CatchUp{Name: "m1", Version: "3.6.0", PID: 42}
	for i, tc := range []struct {
		st   *Status
		want string // substring of the unmet condition; "" when met
	}{
		{st("3.5.0", 42, true, true, 10, 10), `m1 reports version "3.5.0"`},
		{st("3.6.0", 41, true, true, 10, 10), "runs as pid 41, not the restarted 42"},
		{st("3.6.0", 42, false, true, 10, 10), "m1 not healthy: dial refused"},
		{st("3.6.0", 42, true, false, 10, 10), "m3: not healthy"},
		{st("3.6.0", 42, true, true, 5, 100), "catching up to index 100"}, // the target is taken here
		{st("3.6.0", 42, true, true, 99, 150), "m1 applied 99 of 100"},
		{st("3.6.0", 42, true, true, 100, 200), ""}, // the leader moved on: 100 is enough
	} {
		got := g.Check(tc.st)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("check %d: %q, want %q", i, got, tc.want)
		}
	}
}
