package cluster

import (
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/etcd-steward/steward/pkg/spec"
)

func TestInitialClusterFrom(t *testing.T) {
	members := []*pb.Member{
		{ID: 1, Name: "a", PeerURLs: []string{"https://127.0.0.1:1"}},
		{ID: 2, Name: "", PeerURLs: []string{"https://127.0.0.1:2"}},                         // the one just added
		{ID: 3, Name: "", PeerURLs: []string{"https://127.0.0.1:3"}, IsLearner: true},        // added earlier, never started
		{ID: 4, Name: "b", PeerURLs: []string{"https://127.0.0.1:4", "https://127.0.0.1:5"}}, // two peer URLs
	}
	got := initialClusterFrom(members, 2, "new")
	want := "a=https://127.0.0.1:1,new=https://127.0.0.1:2,b=https://127.0.0.1:4,b=https://127.0.0.1:5"
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

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
	c := &Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all := statusOf(
		MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true},
		MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true},
		MemberStatus{Name: "c", Role: "follower", Healthy: true, InSpec: true},
	)
	conds := c.conditions(all, t0)
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
	conds = c.conditions(one, t1)
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
	conds = c.conditions(learning, t1)
	if conds[0].Status != "True" || conds[1].Status != "False" || conds[1].Reason != "LearnerNotPromoted" || !strings.Contains(conds[1].Message, "c") {
		t.Errorf("with a healthy learner: Ready %+v, AllMembersReady %+v", conds[0], conds[1])
	}

	// Quorum lost.
	lost := statusOf(
		MemberStatus{Name: "a", Role: "unknown", InSpec: true},
		MemberStatus{Name: "b", Role: "unknown", InSpec: true},
		MemberStatus{Name: "c", Role: "unknown", InSpec: true},
	)
	conds = c.conditions(lost, t1.Add(time.Hour))
	if conds[0].Status != "False" || conds[0].Reason != "QuorumLost" {
		t.Errorf("Ready without quorum: %+v", conds[0])
	}
}

func TestPickTransferee(t *testing.T) {
	st := statusOf(
		MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true, RaftAppliedIndex: 100},
		MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true, RaftAppliedIndex: 90},
		MemberStatus{Name: "c", Role: "follower", Healthy: true, InSpec: true, RaftAppliedIndex: 99},
		MemberStatus{Name: "d", ID: "d4", Role: "follower", Healthy: false, InSpec: true, RaftAppliedIndex: 100},
		MemberStatus{Name: "e", Role: "learner", Healthy: true, InSpec: true, RaftAppliedIndex: 100},
	)
	if got := pickTransferee(st, "a"); got != "c" {
		t.Errorf("transferee %q, want the most up-to-date healthy follower c", got)
	}
	if got := pickTransferee(statusOf(MemberStatus{Name: "a", Role: "leader", Healthy: true}), "a"); got != "" {
		t.Errorf("transferee %q with no follower", got)
	}
	if v, h := voterCounts(st, "a"); v != 4 || h != 2 {
		t.Errorf("voterCounts = %d, %d; want 4 voters, 2 healthy others", v, h)
	}
	// After a recovery restored one member, the others are in the spec but
	// not in etcd's member list (no ID): they are not voters.
	rec := statusOf(
		MemberStatus{Name: "a", ID: "a1", Role: "leader", Healthy: true, InSpec: true},
		MemberStatus{Name: "b", Role: "unknown", InSpec: true},
		MemberStatus{Name: "c", Role: "unknown", InSpec: true},
	)
	if v, h := voterCounts(rec, "b"); v != 1 || h != 1 {
		t.Errorf("voterCounts after a one-member restore = %d, %d; want 1 voter, 1 healthy other", v, h)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 100 << 20: "100.0 MiB", 2 << 30: "2.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %s, want %s", n, got, want)
		}
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
