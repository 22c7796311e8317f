package adopt

import (
	"slices"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// TestTakeOverOneTransfer runs the switch steps of a take-over planned
// with each member leading (the leader last) on a model of leadership:
// each switch of the leader hands it to rolling.Transferee over
// pendingSwitches, and the plan makes one transfer in all.
func TestTakeOverOneTransfer(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, first := range names {
		p := &plan.Plan{}
		for _, n := range rolling.Order(names, first) {
			p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepTakeOverSwitch, Member: n, State: plan.Pending})
		}
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepTakeOverRecord, State: plan.Pending})
		st := &status.Status{}
		for _, n := range names {
			st.Members = append(st.Members, status.MemberStatus{Name: n, Healthy: true, InSpec: true, Role: "follower"})
		}
		leader, transfers := first, 0
		for i := range p.Steps {
			s := &p.Steps[i]
			if s.Kind == StepTakeOverSwitch && s.Member == leader {
				leader = rolling.Transferee(st, leader, pendingSwitches(p, s.Index))
				transfers++
			}
			s.State = plan.Done
		}
		if transfers != 1 {
			t.Errorf("planned and run with %s leading: %d transfers, want 1", first, transfers)
		}
	}
	p := &plan.Plan{Steps: []plan.Step{
		{Index: 0, Kind: StepTakeOverSwitch, Member: "a", State: plan.Done},
		{Index: 1, Kind: StepTakeOverSwitch, Member: "b"},
		{Index: 2, Kind: StepTakeOverSwitch, Member: "c"},
		{Index: 3, Kind: StepTakeOverRecord},
	}}
	if got, want := pendingSwitches(p, 0), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Errorf("pendingSwitches = %v, want %v", got, want)
	}
}
