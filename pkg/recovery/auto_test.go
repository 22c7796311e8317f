package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/status"
)

// TestActCountsWaitsApart: an automatic recovery that stopped before any
// disruptive action (quorum not proven lost everywhere, or another process
// holding recover.lock) is recorded as a wait, not counted as a failure
// (StewardAutoRecoveryFailed would fire every minute of a partition); a
// real failure and a success are counted. The count goes onto the file as
// it is when the action ends, so a count another process of the directory
// wrote meanwhile is kept.
func TestActCountsWaitsApart(t *testing.T) {
	c := testCluster(t)
	for _, tc := range []struct {
		name       string
		err        error
		wantResult string
	}{
		{"not proven", fmt.Errorf("before stopping seed etcd-1: %w", ErrNotProven), "waited"},
		{"lock held", heldError("recover.lock"), "waited"},
		{"failed", errors.New("restore failed"), "failure"},
		{"done", nil, "success"},
	} {
		a := &autoLoop{dir: c.Dir, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			recover: func(context.Context, *cluster.Cluster) (Report, error) {
				// Another process of the directory counts one
				// meanwhile.
				st, err := status.ReadAutoRecovery(c.Dir)
				if err != nil || st == nil {
					t.Fatalf("state while acting: %v, %v", st, err)
				}
				st.CountAction("restore", status.ReasonQuorumLost, "success")
				if err := status.WriteAutoRecovery(c.Dir, st); err != nil {
					t.Fatal(err)
				}
				return Report{Action: "restore"}, tc.err
			}}
		a.act(t.Context(), c, "recover", "quorum lost")
		st, err := status.ReadAutoRecovery(c.Dir)
		if err != nil || st == nil || st.LastAction == nil {
			t.Fatalf("%s: state %+v, %v", tc.name, st, err)
		}
		if st.LastAction.Result != tc.wantResult {
			t.Errorf("%s: last action's result %q, want %q", tc.name, st.LastAction.Result, tc.wantResult)
		}
		if tc.wantResult == "waited" && st.Decision != "wait" {
			t.Errorf("%s: decision %q, want wait", tc.name, st.Decision)
		}
	}
	st, _ := status.ReadAutoRecovery(c.Dir)
	got := map[string]int64{}
	for _, n := range st.Actions {
		got[n.Action+"/"+n.Result] = n.Count
	}
	// Four counted by "another process", plus this loop's own success;
	// one failure; no wait counted.
	want := map[string]int64{"restore/success": 5, "restore/failure": 1}
	if len(got) != len(want) || got["restore/success"] != 5 || got["restore/failure"] != 1 {
		t.Errorf("counts %v, want %v", got, want)
	}
}
