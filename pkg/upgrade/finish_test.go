package upgrade

import "testing"

// TestFinishDowngradeBefore35: 3.4 has no downgrade (nor its RPC), so a
// hop ending on 3.4 (a rollback by restore, or back from a half-done
// upgrade) has none to end: the step must not ask etcd, which would answer
// Unimplemented on every poll until the step times out.
func TestFinishDowngradeBefore35(t *testing.T) {
	e := &Executor{}
	cancelled := false
	// A nil client: asking etcd would panic.
	if p := e.finishDowngrade(t.Context(), nil, "3.4.0", &cancelled); p != "" || cancelled {
		t.Fatalf("3.4: pending %q, cancelled %v; want nothing pending and no cancel", p, cancelled)
	}
}
