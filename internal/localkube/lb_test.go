package localkube

import (
	"slices"
	"sync/atomic"
	"testing"
)

// TestBalancerPrefersReady: a backend whose /readyz failed is tried only
// after every ready one, whichever is next in turn; with none ready, all
// are tried in turn.
func TestBalancerPrefersReady(t *testing.T) {
	lb := &loadBalancer{backends: []string{"a", "b", "c"}, notReady: make([]atomic.Bool, 3)}
	lb.notReady[1].Store(true)
	for range 3 {
		o := lb.order()
		if len(o) != 3 || o[2] != "b" {
			t.Fatalf("order %v: b is not ready and must come last", o)
		}
	}
	for i := range lb.notReady {
		lb.notReady[i].Store(true)
	}
	if o := lb.order(); len(o) != 3 || !slices.Contains(o, "a") || !slices.Contains(o, "c") {
		t.Errorf("none ready: %v", o)
	}
}
