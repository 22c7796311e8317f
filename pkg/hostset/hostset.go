// Package hostset is the one list of a cluster's hosts (Hosts: the spec's
// agents, in the spec's order) and the one loop over them (Each): every
// operation that asks each host's agent something (hand it the spec, read
// its backup loop, binary store or members' states for a status, push a
// version, renew its certificates, list its kept data dirs) runs through
// Each, so they all share one behaviour:
//
//   - at most Options.Limit hosts at once (0: all at once; 1: one after
//     the other, in host order);
//   - each host's call gets the caller's context, bounded by
//     Options.Timeout when set;
//   - a host whose turn comes after the context ended is not called: its
//     result is the context's error;
//   - Each returns when every call it made has returned, one Result per
//     host in host order, whatever order the calls finished in.
//
// It knows hosts and contexts only: the caller's function makes the
// agent's client (cluster.Cluster.Agent or Runtime) and says what to ask.
package hostset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
)

// Hosts is a list of a cluster's agents, in the spec's order.
type Hosts []spec.Agent

// Remote is the agents of s on other hosts than this machine's (those
// with a host address), in the spec's order.
func Remote(s *spec.Cluster) Hosts {
	var out Hosts
	for _, a := range s.Agents {
		if a.Remote() {
			out = append(out, a)
		}
	}
	return out
}

// All is every agent of s, this machine's too, in the spec's order.
func All(s *spec.Cluster) Hosts {
	return append(Hosts(nil), s.Agents...)
}

// Names is the hosts' agent names, in order.
func (h Hosts) Names() []string {
	var out []string
	for _, a := range h {
		out = append(out, a.Name)
	}
	return out
}

// Filter is the hosts keep accepts, in order.
func (h Hosts) Filter(keep func(spec.Agent) bool) Hosts {
	var out Hosts
	for _, a := range h {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

// Options bound a loop over hosts.
type Options struct {
	// Limit is how many hosts are called at once: 0 all, 1 one after
	// the other in host order.
	Limit int
	// Timeout bounds each host's call (0: only the caller's context).
	Timeout time.Duration
}

// Result is what one host's call returned.
type Result[R any] struct {
	Host  spec.Agent
	Value R
	Err   error
}

// Each calls f for every host (see the package doc for the rules) and
// returns their results in host order.
func Each[R any](ctx context.Context, hosts Hosts, opt Options, f func(ctx context.Context, h spec.Agent) (R, error)) []Result[R] {
	out := make([]Result[R], len(hosts))
	limit := opt.Limit
	if limit <= 0 || limit > len(hosts) {
		limit = len(hosts)
	}
	// sem holds one token per call under way; out[i] is written by the
	// goroutine of host i alone, and read after wg.Wait.
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i, h := range hosts {
		out[i].Host = h
		select {
		case sem <- struct{}{}:
			if err := ctx.Err(); err != nil {
				<-sem
				out[i].Err = err
				continue
			}
		case <-ctx.Done():
			out[i].Err = ctx.Err()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			hctx, cancel := ctx, context.CancelFunc(func() {})
			if opt.Timeout > 0 {
				hctx, cancel = context.WithTimeout(ctx, opt.Timeout)
			}
			defer cancel()
			out[i].Value, out[i].Err = f(hctx, h)
		})
	}
	wg.Wait()
	return out
}

// Do is Each for calls that return only an error: the failures joined,
// each as "host NAME: ERR" (nil when every host succeeded).
func Do(ctx context.Context, hosts Hosts, opt Options, f func(ctx context.Context, h spec.Agent) error) error {
	return Join(Each(ctx, hosts, opt, func(ctx context.Context, h spec.Agent) (struct{}, error) {
		return struct{}{}, f(ctx, h)
	}), "")
}

// Join joins the results' errors in host order, each as
// "<prefix>host NAME: ERR" (nil when there is none).
func Join[R any](rs []Result[R], prefix string) error {
	var errs []error
	for _, r := range rs {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%shost %s: %w", prefix, r.Host.Name, r.Err))
		}
	}
	return errors.Join(errs...)
}
