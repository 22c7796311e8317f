package harness

import "testing"

// For returns e bound to tb, a subtest of the test that made e (one phase
// of a long test, run with t.Run): failures of its methods and the
// cleanups they register (clients they open, say) are then the subtest's,
// so a failure names its phase. The cluster is the same one; e's own
// cleanup (`steward down` and the check for leftover processes) still runs
// when the test that made it ends.
func (e *Env) For(tb testing.TB) *Env {
	c := *e
	c.TB = tb
	return &c
}
