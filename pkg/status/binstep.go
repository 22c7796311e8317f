package status

import (
	"fmt"
	"strings"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// CondBinariesInStep: every other host's binary store holds what this
// machine's does (docs/status.md). Present only when the spec has agents
// on other hosts.
const CondBinariesInStep = "BinariesInStep"

// binariesCondition sums up the hosts' stores: False naming each host that
// differs, Unknown when none differs but some could not be compared, True
// otherwise.
func binariesCondition(agents []AgentStatus) (Condition, bool) {
	var differ, unknown []string
	n := 0
	for _, a := range agents {
		if a.Binaries == nil {
			continue
		}
		n++
		switch a.Binaries.State {
		case cluster.BinariesDiffer:
			differ = append(differ, fmt.Sprintf("host %s %s", a.Name, a.Binaries.Summary()))
		case cluster.BinariesUnknown:
			unknown = append(unknown, fmt.Sprintf("host %s: %s", a.Name, a.Binaries.Error))
		}
	}
	if n == 0 {
		return Condition{}, false
	}
	cond := Condition{Type: CondBinariesInStep, Status: "True", Reason: "BinariesInStep",
		Message: fmt.Sprintf("the binary stores of %d host(s) hold every version of this machine's, with the same SHA-256", n)}
	switch {
	case len(differ) > 0:
		cond.Status, cond.Reason = "False", "BinariesDiffer"
		cond.Message = strings.Join(differ, "; ") + ": push this machine's copy to them"
		if len(unknown) > 0 {
			cond.Message += "; not compared: " + strings.Join(unknown, "; ")
		}
	case len(unknown) > 0:
		cond.Status, cond.Reason = "Unknown", "BinariesUnknown"
		cond.Message = "not compared: " + strings.Join(unknown, "; ")
	}
	return cond, true
}
