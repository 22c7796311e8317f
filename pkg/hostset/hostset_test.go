package hostset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
)

func hosts(n int) Hosts {
	var h Hosts
	for i := range n {
		h = append(h, spec.Agent{Name: fmt.Sprintf("h%d", i), Host: fmt.Sprintf("10.0.0.%d", i+1), Port: 2381})
	}
	return h
}

func TestRemoteAndNames(t *testing.T) {
	s := &spec.Cluster{Agents: []spec.Agent{
		{Name: "local", Address: "unix:///x/agent.sock"},
		{Name: "b", Host: "10.0.0.2", Port: 2381},
		{Name: "a", Host: "10.0.0.1", Port: 2381},
	}}
	if got := Remote(s).Names(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("Remote names = %v, want [b a] (the spec's order, this machine's agent left out)", got)
	}
	if got := All(s).Names(); !slices.Equal(got, []string{"local", "b", "a"}) {
		t.Errorf("All names = %v", got)
	}
	if got := Remote(s).Filter(func(a spec.Agent) bool { return a.Name == "a" }).Names(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("Filter = %v", got)
	}
	if Remote(&spec.Cluster{}) != nil || Remote(&spec.Cluster{}).Names() != nil {
		t.Error("no agents: want nil hosts and names")
	}
}

// TestEachOrderAndLimit: results come back in host order whatever order
// the calls finish in, and no more than Limit calls run at once.
func TestEachOrderAndLimit(t *testing.T) {
	for _, limit := range []int{0, 1, 3, 100} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			hs := hosts(10)
			var running, peak atomic.Int32
			rs := Each(t.Context(), hs, Options{Limit: limit}, func(ctx context.Context, h spec.Agent) (string, error) {
				n := running.Add(1)
				defer running.Add(-1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				// Later hosts finish first.
				i := slices.IndexFunc(hs, func(a spec.Agent) bool { return a.Name == h.Name })
				time.Sleep(time.Duration(len(hs)-i) * time.Millisecond)
				if i%3 == 0 {
					return "", errors.New("no")
				}
				return "v-" + h.Name, nil
			})
			want := limit
			if limit == 0 || limit > len(hs) {
				want = len(hs)
			}
			if p := int(peak.Load()); p > want {
				t.Errorf("peak %d calls at once, limit %d", p, want)
			}
			if limit == 1 && peak.Load() != 1 {
				t.Errorf("limit 1: peak %d", peak.Load())
			}
			if len(rs) != len(hs) {
				t.Fatalf("%d results for %d hosts", len(rs), len(hs))
			}
			for i, r := range rs {
				if r.Host.Name != hs[i].Name {
					t.Errorf("result %d is host %s, want %s", i, r.Host.Name, hs[i].Name)
				}
				if (i%3 == 0) != (r.Err != nil) || (r.Err == nil && r.Value != "v-"+r.Host.Name) {
					t.Errorf("result %d: %+v", i, r)
				}
			}
		})
	}
}

// TestEachSerialInOrder: Limit 1 calls the hosts one after the other in
// host order.
func TestEachSerialInOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	Each(t.Context(), hosts(6), Options{Limit: 1}, func(ctx context.Context, h spec.Agent) (int, error) {
		mu.Lock()
		order = append(order, h.Name)
		mu.Unlock()
		return 0, nil
	})
	if !slices.Equal(order, hosts(6).Names()) {
		t.Errorf("order %v", order)
	}
}

// TestEachContextEnded: a host whose turn comes after the context ended is
// not called, and its result is the context's error; calls under way see
// the cancellation.
func TestEachContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var called atomic.Int32
	rs := Each(ctx, hosts(5), Options{Limit: 1}, func(ctx context.Context, h spec.Agent) (int, error) {
		called.Add(1)
		if h.Name == "h1" {
			cancel()
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return 1, nil
	})
	if called.Load() != 2 {
		t.Errorf("%d calls, want 2 (h0, and h1 which cancelled)", called.Load())
	}
	for i, r := range rs {
		if i == 0 && r.Err != nil {
			t.Errorf("h0: %v", r.Err)
		}
		if i > 0 && !errors.Is(r.Err, context.Canceled) {
			t.Errorf("%s: err %v, want context.Canceled", r.Host.Name, r.Err)
		}
	}
	// Already ended: nothing is called.
	called.Store(0)
	rs = Each(ctx, hosts(3), Options{}, func(context.Context, spec.Agent) (int, error) { called.Add(1); return 0, nil })
	if called.Load() != 0 || len(rs) != 3 || !errors.Is(rs[2].Err, context.Canceled) {
		t.Errorf("ended context: %d calls, results %+v", called.Load(), rs)
	}
}

// TestEachTimeout: Options.Timeout bounds each call, not the loop.
func TestEachTimeout(t *testing.T) {
	start := time.Now()
	rs := Each(t.Context(), hosts(3), Options{Limit: 1, Timeout: 20 * time.Millisecond}, func(ctx context.Context, h spec.Agent) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			return 0, errors.New("no deadline")
		}
		if h.Name == "h1" {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return 1, nil
	})
	if !errors.Is(rs[1].Err, context.DeadlineExceeded) || rs[0].Err != nil || rs[2].Err != nil {
		t.Errorf("results %+v", rs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

func TestDoAndJoin(t *testing.T) {
	err := Do(t.Context(), hosts(4), Options{}, func(ctx context.Context, h spec.Agent) error {
		if h.Name == "h1" || h.Name == "h3" {
			return errors.New("refused")
		}
		return nil
	})
	if err == nil || err.Error() != "host h1: refused\nhost h3: refused" {
		t.Errorf("Do = %q", err)
	}
	if err := Do(t.Context(), hosts(2), Options{}, func(context.Context, spec.Agent) error { return nil }); err != nil {
		t.Errorf("all succeeded: %v", err)
	}
	if err := Do(t.Context(), nil, Options{}, func(context.Context, spec.Agent) error { return errors.New("x") }); err != nil {
		t.Errorf("no hosts: %v", err)
	}
	rs := []Result[int]{{Host: spec.Agent{Name: "a"}, Err: context.Canceled}}
	if err := Join(rs, "hand the spec to "); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "hand the spec to host a: ") {
		t.Errorf("Join = %v", err)
	}
}
