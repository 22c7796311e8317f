package core_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestScaling grows a cluster 1 -> 3 -> 5 and shrinks it 5 -> 3 -> 1 while a
// client writes throughout (each write retried the way an ordinary client
// would); every acknowledged write must be readable at the end, and writes
// must go on in every phase.
func TestScaling(t *testing.T) {
	t.Parallel()
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			e.Up(1, v)
			first := e.Spec().Members[0].Name
			w := harness.UnderWrites(t, e.Client(first), workload.Options{Prefix: "writer", Attempts: 20, RetryDelay: 100 * time.Millisecond, Interval: 5 * time.Millisecond}, harness.Expect{})
			// A phase runs the membership changes, waits for n healthy
			// voting members, and requires the writer to make progress
			// after them.
			phase := func(name string, n int, args ...[]string) bool {
				return t.Run(name, func(t *testing.T) {
					e := e.For(t)
					before := w.Acked()
					for _, a := range args {
						e.MustRun(a...)
					}
					st := e.WaitStatus(60*time.Second, fmt.Sprintf("%d healthy members", n), func(st *status.Status) bool {
						return harness.Healthy(st) && len(st.Members) == n
					})
					if st.Cluster.VotingMembers != n || st.Cluster.Learners != 0 {
						t.Fatalf("want %d voting members and no learners, got %d voting, %d learners", n, st.Cluster.VotingMembers, st.Cluster.Learners)
					}
					harness.Eventually(t, 30*time.Second, 50*time.Millisecond, "writes to go on", w.AckedAbove(before+19))
				})
			}
			if !phase("1 to 3", 3, []string{"member", "add", "m2"}, []string{"member", "add", "m3"}) ||
				!phase("3 to 5", 5, []string{"member", "add", "m4"}, []string{"member", "add", "m5"}) ||
				!phase("5 to 3", 3, []string{"member", "remove", "m4"}, []string{"member", "remove", "m5"}) ||
				!phase("3 to 1", 1, []string{"member", "remove", "m2"}, []string{"member", "remove", "m3"}) {
				return
			}
			// Read back through first's client: the one member left.
			w.Finish(t)
			if got := e.Spec().MemberNames(); len(got) != 1 || got[0] != first {
				t.Errorf("spec members after scaling: %v, want [%s]", got, first)
			}
		})
	}
}
