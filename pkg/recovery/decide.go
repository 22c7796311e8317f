package recovery

import (
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/status"
)

// Who acts on a multi-host cluster, and on what evidence (docs/hosts.md,
// "Automatic recovery across hosts", has the proof):
//
//   - Only the coordinator's directory acts (its agent, or the `steward
//     certs renew --watch` process `steward up` starts there): it alone
//     holds the admin certificate that every host's agent obeys, and its
//     recover lock and journal are the ones `steward recover` uses. A
//     host's agent never acts (its certificate is refused by every other
//     agent, and its own view is one host's).
//   - It acts only on positive evidence that no majority is alive
//     anywhere: Decide counts a member as down only when its own agent
//     answers and reports its process not running (Stopped, BackOff,
//     CrashLoopBackOff, Failed), or that it runs no such member
//     (NotRunByAgent). A member whose agent does not answer, or whose
//     process runs, may be part of a live majority the coordinator
//     cannot see: it is never counted as down. Quorum is lost everywhere
//     when the members down are more than the spec can spare.
//   - Every agent must answer: Run stops every member before it looks at a
//     data dir, and a stop on an unreachable host would fail halfway.
//   - A journaled recovery the loop resumes is checked again: before each
//     disruptive action run checks Decide on a fresh view (runDeps.proven).

// MemberView is what the coordinator sees of one member.
type MemberView struct {
	Name  string
	Agent string
	// AgentReachable: the member's agent answered this round.
	AgentReachable bool
	// Process is the agent's process state (memberrt.State...); ignored
	// when the agent did not answer.
	Process string
	Healthy bool
}

// Observation is one round's view of a multi-host cluster.
type Observation struct {
	Quorate bool
	Members []MemberView
}

// Decision is what Decide concluded, with its reason.
type Decision struct {
	// Act: quorum is lost everywhere, by the agents' own reports.
	Act bool
	// Reason says why (it is recorded and shown by `steward status`).
	Reason string
}

// down reports whether a process state proves that no etcd process of
// the member runs. An agent that answers and runs no such member
// (status.ProcessNotRunByAgent: its directory was lost and it joined
// again, as a member pod whose volume was deleted does) proves it too.
func down(state string) bool {
	switch state {
	case memberrt.StateStopped, memberrt.StateBackoff, memberrt.StateCrashLoop, memberrt.StateFailed, status.ProcessNotRunByAgent:
		return true
	}
	return false
}

// Decide is the coordinator's decision for a multi-host cluster (see the
// comment above): it acts only when every agent answers and the members
// their agents report not running are more than the spec can spare.
func Decide(o Observation) Decision {
	n := len(o.Members)
	if n == 0 {
		return Decision{Reason: "the spec has no members"}
	}
	quorum := n/2 + 1
	if o.Quorate {
		return Decision{Reason: "the cluster is quorate"}
	}
	var unreachable, downs, alive []string
	for _, m := range o.Members {
		switch {
		case !m.AgentReachable:
			unreachable = append(unreachable, fmt.Sprintf("%s (agent %s)", m.Name, m.Agent))
		case down(m.Process):
			downs = append(downs, fmt.Sprintf("%s: %s", m.Name, m.Process))
		default:
			alive = append(alive, fmt.Sprintf("%s: %s", m.Name, orUnknown(m.Process)))
		}
	}
	slices.Sort(unreachable)
	if len(unreachable) > 0 {
		return Decision{Reason: fmt.Sprintf("quorum lost as seen from the coordinator, but the agents of %s do not answer: a majority may be alive where the coordinator cannot see it; waiting for every agent to answer", strings.Join(unreachable, ", "))}
	}
	if n-len(downs) >= quorum {
		return Decision{Reason: fmt.Sprintf("quorum lost as seen from the coordinator, but only %d of %d members are reported not running by their agents (%s; running: %s): a majority may still be alive; waiting",
			len(downs), n, orNone(downs), orNone(alive))}
	}
	return Decision{Act: true, Reason: fmt.Sprintf("quorum lost everywhere: %d of %d members reported not running by their own agents (%s), quorum is %d",
		len(downs), n, strings.Join(downs, ", "), quorum)}
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
