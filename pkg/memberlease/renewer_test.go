package memberlease

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRenewerFollowsHealth: the Renewer writes the holder while its
// health function says healthy, nothing while it does not, and returns
// once its context ends. (Against a real API server, with conflicts:
// TestMemberLease in test/e2e/kube.)
func TestRenewerFollowsHealth(t *testing.T) {
	seconds := int32(1) // renewed every 333 ms
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m-0"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds},
	})
	var healthy atomic.Bool
	checks := atomic.Int32{}
	r := &Renewer{Leases: cs.CoordinationV1(), Lease: Ref{"ns", "m-0"}, Log: slog.New(slog.DiscardHandler),
		Health: func(ctx context.Context) State {
			checks.Add(1)
			if !healthy.Load() {
				return State{Why: "stopped"}
			}
			return State{Healthy: true, Holder: Holder{ID: 0xabc, Role: RoleLeader}}
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	get := func() *coordinationv1.Lease {
		l, err := cs.CoordinationV1().Leases("ns").Get(t.Context(), "m-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("two health checks", func() bool { return checks.Load() >= 2 })
	if l := get(); l.Spec.HolderIdentity != nil || l.Spec.RenewTime != nil {
		t.Fatalf("an unhealthy member's lease was written: %+v", l.Spec)
	}
	healthy.Store(true)
	waitFor("the holder", func() bool {
		h := get().Spec.HolderIdentity
		return h != nil && *h == "abc:Leader"
	})
	l := get()
	if l.Spec.RenewTime == nil || l.Spec.AcquireTime == nil || *l.Spec.LeaseTransitions != 1 {
		t.Errorf("first renewal: %+v", l.Spec)
	}
	first := l.Spec.RenewTime.Time
	waitFor("a second renewal", func() bool { return get().Spec.RenewTime.After(first) })
	if n := *get().Spec.LeaseTransitions; n != 1 {
		t.Errorf("leaseTransitions %d after renewals by the same holder", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
