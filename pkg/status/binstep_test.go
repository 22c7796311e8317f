package status

import (
	"encoding/json"
	"github.com/etcd-steward/steward/pkg/cluster"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
)

func TestBinariesCondition(t *testing.T) {
	inStep := &cluster.HostBinaries{State: cluster.BinariesInStep}
	differs := &cluster.HostBinaries{State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}, Different: []string{"3.6.16"}}}
	unknown := &cluster.HostBinaries{State: cluster.BinariesUnknown, Error: "the agent does not list its binaries (an older steward)"}
	for _, tc := range []struct {
		name           string
		agents         []AgentStatus
		present        bool
		status, reason string
		message        []string
	}{
		{name: "one host: no condition", agents: []AgentStatus{{Name: "local"}}},
		{name: "in step", agents: []AgentStatus{{Name: "local"}, {Name: "h1", Binaries: inStep}, {Name: "h2", Binaries: inStep}},
			present: true, status: "True", reason: "BinariesInStep", message: []string{"2 host(s)"}},
		{name: "one differs, one unknown", agents: []AgentStatus{{Name: "h1", Binaries: differs}, {Name: "h2", Binaries: unknown}, {Name: "h3", Binaries: inStep}},
			present: true, status: "False", reason: "BinariesDiffer",
			message: []string{"host h1 lacks etcd 3.5.35, 3.7.3; holds another build of etcd 3.6.16", "not compared: host h2: the agent does not list"}},
		{name: "unknown only", agents: []AgentStatus{{Name: "h1", Binaries: inStep}, {Name: "h2", Binaries: unknown}},
			present: true, status: "Unknown", reason: "BinariesUnknown", message: []string{"host h2: the agent does not list its binaries"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cond, ok := binariesCondition(tc.agents)
			if ok != tc.present {
				t.Fatalf("present %v, want %v", ok, tc.present)
			}
			if !ok {
				return
			}
			if cond.Type != CondBinariesInStep || cond.Status != tc.status || cond.Reason != tc.reason {
				t.Errorf("condition %+v, want %s %s", cond, tc.status, tc.reason)
			}
			for _, m := range tc.message {
				if !strings.Contains(cond.Message, m) {
					t.Errorf("message %q lacks %q", cond.Message, m)
				}
			}
		})
	}
	// The JSON names scripts read.
	b, _ := json.Marshal(differs)
	if got := string(b); got != `{"state":"differs","lacking":["3.5.35","3.7.3"],"different":["3.6.16"]}` {
		t.Errorf("JSON %s", got)
	}
}
