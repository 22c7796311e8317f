package recovery

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/status"
)

func views(states ...string) []MemberView {
	var out []MemberView
	for i, s := range states {
		name := string(rune('1' + i))
		v := MemberView{Name: "etcd-" + name, Agent: "h" + name, AgentReachable: s != "unreachable", Process: s}
		if s == "unreachable" {
			v.Process = "Unknown"
		}
		out = append(out, v)
	}
	return out
}

// TestDecide is the coordinator's decision table across hosts: it acts
// only on its agents' reports that a majority of members does not run,
// never on what it cannot see.
func TestDecide(t *testing.T) {
	const (
		run  = memberrt.StateRunning
		fail = memberrt.StateFailed
		stop = memberrt.StateStopped
		crsh = memberrt.StateCrashLoop
		back = memberrt.StateBackoff
		strt = memberrt.StateStarting
		gone = "unreachable"
		none = status.ProcessNotRunByAgent
	)
	for _, tc := range []struct {
		name    string
		quorate bool
		states  []string
		act     bool
		reason  string
	}{
		{"quorate", true, []string{run, run, run}, false, "quorate"},
		{"quorate with a member down", true, []string{run, fail, run}, false, "quorate"},
		// The coordinator cut off with one host: it cannot tell a dead
		// majority from a live one it does not reach.
		{"coordinator sees only a minority", false, []string{run, gone, gone}, false, "etcd-2 (agent h2), etcd-3 (agent h3) do not answer"},
		{"majority down but one host unreachable", false, []string{fail, fail, gone}, false, "etcd-3 (agent h3) do not answer"},
		// Peers cut from each other, every process running: a majority
		// may be alive; nothing proves it is not.
		{"all running, no quorum", false, []string{run, run, run}, false, "only 0 of 3 members"},
		{"one down is spare", false, []string{fail, run, run}, false, "only 1 of 3"},
		{"a starting process may join a majority", false, []string{fail, strt, run}, false, "only 1 of 3"},
		{"two of three lost their data", false, []string{fail, fail, run}, true, "2 of 3 members reported not running"},
		{"every state that runs no process counts", false, []string{stop, crsh, back}, true, "3 of 3"},
		{"five: two down are spare", false, []string{fail, fail, run, run, run}, false, "only 2 of 5"},
		{"five: three down", false, []string{fail, fail, stop, run, run}, true, "3 of 5"},
		{"five: three down, one unreachable", false, []string{fail, fail, stop, gone, run}, false, "etcd-4 (agent h4) do not answer"},
		{"one member, down", false, []string{fail}, true, "1 of 1"},
		// Member pods whose volumes were deleted come back as agents
		// that joined again and run no member.
		{"two of three volumes gone", false, []string{none, none, run}, true, "2 of 3 members reported not running"},
		{"one volume gone is spare", false, []string{none, run, run}, false, "only 1 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Observation{Quorate: tc.quorate, Members: views(tc.states...)})
			if d.Act != tc.act || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("Decide(%v) = %+v; want act %v, a reason with %q", tc.states, d, tc.act, tc.reason)
			}
		})
	}
	if d := Decide(Observation{}); d.Act {
		t.Errorf("no members: %+v", d)
	}
}
