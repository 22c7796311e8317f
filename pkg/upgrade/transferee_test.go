package upgrade

import (
	"slices"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
)

// TestTransfersPerHop runs the leader hand-over of the executor's member
// steps over rolling plans (the planner's shape: the leader at planning
// time swapped last, every other hop in reverse) and counts leadership
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
			st := &cluster.Status{}
			for _, m := range tc.members {
				st.Members = append(st.Members, cluster.MemberStatus{Name: m, Healthy: true, Role: "follower", Version: "3.4.23"})
			}
			transfers := 0
			for i := range p.Steps {
				s := &p.Steps[i]
				if s.Kind != StepMember {
					continue
				}
				if s.Member == leader {
					to := transferee(st, s.Member, s.Version, nextSteps(p, i))
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

// TestTransfereePrefersTargetVersion: a member already on the target
// version wins over one whose next step is further away; unhealthy members
// and learners are never picked.
func TestTransfereePrefersTargetVersion(t *testing.T) {
	st := &cluster.Status{Members: []cluster.MemberStatus{
		{Name: "a", Healthy: true, Role: "follower", Version: "3.6.16"},
		{Name: "b", Healthy: true, Role: "follower", Version: "3.5.35"},
		{Name: "c", Healthy: true, Role: "leader", Version: "3.5.35"},
		{Name: "d", Healthy: false, Role: "follower", Version: "3.6.16"},
		{Name: "e", Healthy: true, Role: "learner", Version: "3.6.16"},
	}}
	if got := transferee(st, "c", "3.6.16", map[string]int{"a": 5, "b": 9}); got != "a" {
		t.Fatalf("transferee %q, want a (on the target version)", got)
	}
	if got := transferee(st, "c", "3.7.3", map[string]int{"a": 5}); got != "b" {
		t.Fatalf("transferee %q, want b (no step left)", got)
	}
}
