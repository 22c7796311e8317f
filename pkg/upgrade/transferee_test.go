package upgrade

import (
	"slices"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// TestTransfersPerHop runs the leader hand-over of the executor's member
// steps (rolling.Transferee over pending) over rolling plans (the
// planner's shape: the leader at planning time swapped last, every other
// hop in reverse) and counts leadership
// transfers: one per hop, none for a follower's step. Handing leadership to
// the member swapped first in the next hop made a two-hop plan transfer
// three times.
func TestTransfersPerHop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		members  []string
		versions []string // one hop per version
		want     int
	}{
		{"one hop, three members", []string{"a", "b", "c"}, []string{"3.6.16"}, 1},
		{"two hops, three members", []string{"a", "b", "c"}, []string{"3.6.16", "3.7.3"}, 2},
		{"two hops, five members", []string{"a", "b", "c", "d", "e"}, []string{"3.6.16", "3.7.3"}, 2},
		{"three hops, three members", []string{"a", "b", "c"}, []string{"3.5.35", "3.6.16", "3.7.3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := tc.members[len(tc.members)-1] // memberOrder: the leader last
			p := &plan.Plan{}
			order := slices.Clone(tc.members)
			for i, v := range tc.versions {
				if i > 0 {
					slices.Reverse(order) // as the planner does
				}
				p.Steps = append(p.Steps, plan.Step{Kind: StepPreflight, Version: v})
				for _, m := range order {
					p.Steps = append(p.Steps, plan.Step{Kind: StepMember, Member: m, Version: v})
				}
				p.Steps = append(p.Steps, plan.Step{Kind: StepClusterVersion, Version: v})
			}
			for i := range p.Steps {
				p.Steps[i].Index = i
			}
			st := &status.Status{}
			for _, m := range tc.members {
				st.Members = append(st.Members, status.MemberStatus{Name: m, Healthy: true, InSpec: true, Role: "follower", Version: "3.4.23"})
			}
			transfers := 0
			for i := range p.Steps {
				s := &p.Steps[i]
				if s.Kind != StepMember {
					continue
				}
				if s.Member == leader {
					to := rolling.Transferee(st, s.Member, pending(st, p, i))
					if to == "" {
						t.Fatalf("step %d: no transferee", i)
					}
					leader = to
					transfers++
				}
				for j := range st.Members {
					if st.Members[j].Name == s.Member {
						st.Members[j].Version = s.Version
					}
				}
			}
			if transfers != tc.want {
				t.Fatalf("%d leadership transfers, want %d (one per hop)", transfers, tc.want)
			}
		})
	}
}

// TestPendingLeavesOutDone: pending lists the members of later member
// steps in order, once each, but not a member whose later steps all go to
// the version it runs (they restart nothing), so the rule prefers it.
func TestPendingLeavesOutDone(t *testing.T) {
	st := &status.Status{Members: []status.MemberStatus{
		{Name: "a", Healthy: true, InSpec: true, Role: "follower", Version: "3.6.16", RaftAppliedIndex: 1},
		{Name: "b", Healthy: true, InSpec: true, Role: "follower", Version: "3.5.35", RaftAppliedIndex: 9},
		{Name: "c", Healthy: true, InSpec: true, Role: "leader", Version: "3.5.35"},
		{Name: "d", Healthy: false, InSpec: true, Role: "follower", Version: "3.6.16"},
		{Name: "e", Healthy: true, InSpec: true, Role: "learner", Version: "3.6.16"},
	}}
	p := &plan.Plan{}
	for _, m := range []string{"c", "a", "b", "a"} {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepMember, Member: m, Version: "3.6.16"})
	}
	if got, want := pending(st, p, 0), []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	if got := rolling.Transferee(st, "c", pending(st, p, 0)); got != "a" {
		t.Fatalf("transferee %q, want a (on the target version, nothing left to do)", got)
	}
	p.Steps[3].Version = "3.7.3"
	if got, want := pending(st, p, 0), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("pending = %v, want %v", got, want)
	}
	if got := rolling.Transferee(st, "c", pending(st, p, 0)); got != "b" {
		t.Fatalf("transferee %q, want b (its turn comes after a's)", got)
	}
}
