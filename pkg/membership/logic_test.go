package membership

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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

func statusOf(ms ...status.MemberStatus) *status.Status {
	st := &status.Status{Members: ms}
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

func TestPickTransferee(t *testing.T) {
	st := statusOf(
		status.MemberStatus{Name: "a", Role: "leader", Healthy: true, InSpec: true, RaftAppliedIndex: 100},
		status.MemberStatus{Name: "b", Role: "follower", Healthy: true, InSpec: true, RaftAppliedIndex: 90},
		status.MemberStatus{Name: "c", Role: "follower", Healthy: true, InSpec: true, RaftAppliedIndex: 99},
		status.MemberStatus{Name: "d", ID: "d4", Role: "follower", Healthy: false, InSpec: true, RaftAppliedIndex: 100},
		status.MemberStatus{Name: "e", Role: "learner", Healthy: true, InSpec: true, RaftAppliedIndex: 100},
	)
	if got := pickTransferee(st, "a"); got != "c" {
		t.Errorf("transferee %q, want the most up-to-date healthy follower c", got)
	}
	if got := pickTransferee(statusOf(status.MemberStatus{Name: "a", Role: "leader", Healthy: true}), "a"); got != "" {
		t.Errorf("transferee %q with no follower", got)
	}
	if v, h := voterCounts(st, "a"); v != 4 || h != 2 {
		t.Errorf("voterCounts = %d, %d; want 4 voters, 2 healthy others", v, h)
	}
	// After a recovery restored one member, the others are in the spec but
	// not in etcd's member list (no ID): they are not voters.
	rec := statusOf(
		status.MemberStatus{Name: "a", ID: "a1", Role: "leader", Healthy: true, InSpec: true},
		status.MemberStatus{Name: "b", Role: "unknown", InSpec: true},
		status.MemberStatus{Name: "c", Role: "unknown", InSpec: true},
	)
	if v, h := voterCounts(rec, "b"); v != 1 || h != 1 {
		t.Errorf("voterCounts after a one-member restore = %d, %d; want 1 voter, 1 healthy other", v, h)
	}
}

// TestRemoveLastMember: removing the last member is refused with
// ErrLastMember, even with Force, before the cluster is asked anything;
// the message names no command (the command adds `steward down --purge`).
func TestRemoveLastMember(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Members: []spec.Member{{Name: "etcd-1"}}}}
	for _, force := range []bool{false, true} {
		err := Remove(context.Background(), c, "etcd-1", RemoveOptions{Force: force})
		if !errors.Is(err, ErrLastMember) {
			t.Fatalf("Remove (force %v): %v, want ErrLastMember", force, err)
		}
		if want := "refusing to remove etcd-1: it is the last member of the cluster"; err.Error() != want {
			t.Errorf("Remove: %q, want %q", err, want)
		}
	}
}

func TestPrivateLearner(t *testing.T) {
	const learner = "https://127.0.0.1:9"
	voter := func(n int) *pb.Member {
		return &pb.Member{ID: uint64(n), Name: "m", PeerURLs: []string{"https://127.0.0.1:" + string(rune('0'+n))}}
	}
	added := &pb.Member{ID: 9, PeerURLs: []string{learner}, IsLearner: true}
	for _, tc := range []struct {
		name    string
		members []*pb.Member
		want    bool
	}{
		{"beside one voter: a restart would stop the cluster", []*pb.Member{voter(1), added}, false},
		{"beside two voters", []*pb.Member{voter(1), voter(2), added}, true},
		{"beside four voters", []*pb.Member{voter(1), voter(2), voter(3), voter(4), added}, true},
		{"another learner is no voter", []*pb.Member{voter(1), {ID: 5, PeerURLs: []string{"https://127.0.0.1:5"}, IsLearner: true}, added}, false},
		{"its old voting entry is not counted", []*pb.Member{voter(1), {ID: 8, PeerURLs: []string{learner}}, added}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := privateLearner(tc.members, learner); got != tc.want {
				t.Errorf("privateLearner = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRequireNoDowngrade(t *testing.T) {
	quiet := statusOf(status.MemberStatus{Name: "a", Healthy: true}, status.MemberStatus{Name: "b", Healthy: true})
	if err := requireNoDowngrade(quiet, nil, "add a member"); err != nil {
		t.Fatalf("no member reports a downgrade, no plan: %v", err)
	}
	down := statusOf(status.MemberStatus{Name: "a", Healthy: true}, status.MemberStatus{Name: "b", Healthy: true, DowngradeTarget: "3.5.0"})
	err := requireNoDowngrade(down, nil, "replace a")
	if !errors.Is(err, ErrDowngradeInProgress) {
		t.Fatalf("a member reports a downgrade: got %v, want ErrDowngradeInProgress", err)
	}
	// No open plan enabled it (etcdctl did, or its plan was aborted): the
	// refusal says how to end it by hand, not to resume a plan.
	for _, want := range []string{"refusing to replace a", "downgrade to 3.5.0", "b says so", "etcdctl downgrade cancel"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if errors.Is(err, ErrDowngradeOfPlan) || strings.Contains(err.Error(), "finish plan") {
		t.Errorf("refusal %q points to a plan, and none is open", err)
	}

	// 3.5 members report nothing: the plan tells.
	step := func(kind string, state plan.State) plan.Step {
		return plan.Step{Kind: kind, Version: "3.5.35", State: state}
	}
	rollback := func(state plan.State, steps ...plan.Step) *plan.Plan {
		return &plan.Plan{ID: "rollback-1", Kind: plan.KindRollback, State: state, Steps: steps}
	}
	// A member reports the downgrade its plan enabled: resume that plan.
	open := rollback(plan.Failed, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Failed))
	err = requireNoDowngrade(down, open, "replace a")
	for _, want := range []string{"b says so", "finish plan rollback-1"} {
		if !errors.Is(err, ErrDowngradeOfPlan) || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v under an open plan does not say %q", err, want)
		}
	}
	// The command adds how to finish it (cli.DowngradeHint) after the end.
	if !strings.HasSuffix(err.Error(), "; finish plan rollback-1") {
		t.Errorf("refusal %q does not end naming the plan to finish", err)
	}
	if err := requireNoDowngrade(down, rollback(plan.Aborted, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Pending)), "replace a"); err == nil || errors.Is(err, ErrDowngradeOfPlan) || strings.Contains(err.Error(), "finish plan") {
		t.Errorf("a member reports a downgrade, its plan aborted: %v; want a refusal without plan resume", err)
	}
	member := step("member", plan.Done)
	tests := []struct {
		name   string
		p      *plan.Plan
		refuse bool
	}{
		{"enabled, members swapped, stopped before the end", rollback(plan.Failed, step(StepDowngradeEnable, plan.Done), member, step(StepClusterVersion, plan.Failed)), true},
		{"enabled, still running", rollback(plan.Running, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Pending)), true},
		{"not enabled yet", rollback(plan.Failed, step(StepDowngradeEnable, plan.Failed), step(StepClusterVersion, plan.Pending)), false},
		{"ended", rollback(plan.Running, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Done), step("preflight", plan.Pending)), false},
		{"second hop enabled after the first ended", rollback(plan.Failed, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Done), step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Pending)), true},
		{"plan aborted", rollback(plan.Aborted, step(StepDowngradeEnable, plan.Done), step(StepClusterVersion, plan.Pending)), false},
	}
	for _, tt := range tests {
		err := requireNoDowngrade(quiet, tt.p, "replace a")
		if got := err != nil; got != tt.refuse {
			t.Errorf("%s: refused %v (%v), want %v", tt.name, got, err, tt.refuse)
			continue
		}
		if tt.refuse && (!errors.Is(err, ErrDowngradeInProgress) || !strings.Contains(err.Error(), "plan rollback-1 enabled etcd's downgrade to 3.5.35")) {
			t.Errorf("%s: refusal %v does not name the plan and the target", tt.name, err)
		}
	}
}
