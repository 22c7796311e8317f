package agent

import (
	"context"

	"github.com/etcd-steward/steward/pkg/memberlease"
)

// LeaseHealth is the health function of the member lease (DEP-01) of
// member name, for memberlease.Renewer: healthy when the member is
// started, a voting member (a learner is not) and healthy by etcd's own
// status (a leader known, no error), with its ID and role from that status.
// Its catch-up with the leader is /readyz's, not the lease's.
//
// The member is the one named name (DEP-01 names a lease after its
// member), else the agent's only member (a member pod's agent runs one);
// with neither, nothing is healthy.
func (a *Agent) LeaseHealth(name string) memberlease.HealthFunc {
	return func(ctx context.Context) memberlease.State {
		n := name
		a.mu.Lock()
		if _, ok := a.members[n]; !ok {
			n = ""
			if len(a.members) == 1 {
				for k := range a.members {
					n = k
				}
			}
		}
		a.mu.Unlock()
		if n == "" {
			return memberlease.State{Why: "the agent runs no member " + name + " and not exactly one member"}
		}
		mr := a.memberReadiness(ctx, n, false)
		if !mr.Ready {
			return memberlease.State{Why: mr.Reason + ": " + mr.Message}
		}
		role := memberlease.RoleMember
		if mr.leader {
			role = memberlease.RoleLeader
		}
		return memberlease.State{Healthy: true, Holder: memberlease.Holder{ID: mr.id, Role: role}}
	}
}
