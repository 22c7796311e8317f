package status

import (
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// Stopped is the status of a stopped cluster (cluster.Cluster.Stopped), built
// without probing: every member's process Stopped, Ready and
// AllMembersReady False with reason ClusterStopped.
func Stopped(c *cluster.Cluster, now time.Time) *Status {
	st := &Status{Cluster: specStatus(c)}
	st.Cluster.Stopped, st.Cluster.VotingMembers = true, len(c.Spec.Members)
	for _, m := range c.Spec.Members {
		st.Members = append(st.Members, MemberStatus{
			Name: m.Name, ClientURLs: []string{m.ClientURL}, PeerURLs: []string{m.PeerURL},
			Role: "unknown", Alarms: []string{}, Agent: m.Agent, InSpec: true, Process: ProcessStopped,
		})
	}
	for _, a := range c.Spec.Agents {
		st.Agents = append(st.Agents, AgentStatus{Name: a.Name, Endpoint: a.Endpoint(), Error: "not running", MetricsURL: c.Spec.MetricsURL(a)})
	}
	msg := c.StoppedError("").Error()
	st.Conditions = []Condition{
		{Type: CondReady, Status: "False", Reason: ReasonClusterStopped, Message: msg, LastTransitionTime: now},
		{Type: CondAllMembersReady, Status: "False", Reason: ReasonClusterStopped, Message: msg, LastTransitionTime: now},
	}
	return st
}

// ProcessStopped is a member's process in the status of a stopped
// cluster; ReasonClusterStopped the reason of its conditions.
const (
	ProcessStopped       = "Stopped"
	ReasonClusterStopped = "ClusterStopped"
)

// External is what status says in the agent and process columns of a
// member of an attached cluster.
const External = "external"
