// Package binpush pushes a version of this machine's binary store to the
// agents of a cluster's other hosts, each host's copy checked there.
package binpush

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Cluster is what a push needs of a cluster: its spec, where it lives,
// and how to reach an agent (cluster.Cluster's fields and Agent, handed
// over by the command).
type Cluster struct {
	Spec *spec.Cluster
	// Dir is the Steward directory (the spec's binary store is under it
	// unless the spec names one); SpecPath is its spec, named in refusals.
	Dir, SpecPath string
	// Agent returns the client of the named agent (cluster.Cluster.Agent).
	Agent    func(name string) (*agentapi.Client, error)
	Progress progress.Func
}

// Options configure Push.
type Options struct {
	// Store is the local store the version is pushed from; nil: the
	// spec's binary store.
	Store *binaries.Store
	// Hosts names the hosts (agents on other hosts) to push to; empty:
	// every one in the spec.
	Hosts []string
	// Timeout bounds each host's push (default 10 minutes).
	Timeout time.Duration
	// Replace replaces another build a host stores under the version (or
	// a damaged copy) with this store's, the host's old copy moved aside;
	// without it such a host refuses the push.
	Replace bool
}

// Results of one host's push (HostPush.Result).
const (
	PushInstalled = agentapi.PushInstalled
	PushPresent   = agentapi.PushPresent
	PushFailed    = "failed"
)

// HostPush is the outcome of pushing a version to one host.
type HostPush struct {
	Host     string `json:"host"`
	Address  string `json:"address"`
	Endpoint string `json:"endpoint"`
	// Result is PushInstalled, PushPresent or PushFailed.
	Result string `json:"result"`
	// Binary is the etcd server in the host's store.
	Binary string `json:"binary,omitempty"`
	Error  string `json:"error,omitempty"`
	// Err is the failure Error says, for a command that adds its advice
	// to Error before it shows the result.
	Err error `json:"-"`
	// Duration is how long the host's push took.
	Duration time.Duration `json:"durationNs"`
}

// PushResult is the outcome of Push, one entry per host in the
// spec's order.
type PushResult struct {
	Version string     `json:"version"`
	Store   string     `json:"store"`
	Hosts   []HostPush `json:"hosts"`
}

// Failed returns the hosts the version did not reach.
func (r PushResult) Failed() []string {
	var out []string
	for _, h := range r.Hosts {
		if h.Result == PushFailed {
			out = append(out, h.Host)
		}
	}
	return out
}

var (
	// ErrNoHosts: the spec has no agent on another host to push to.
	ErrNoHosts = errors.New("no other hosts")
	// ErrPushIncomplete: the version did not reach every host asked
	// (PushResult names them); the hosts it reached keep it.
	ErrPushIncomplete = errors.New("the version did not reach every host")
)

// pushParallel bounds the hosts pushed to at once.
const pushParallel = 4

// Push makes etcd version of the local store available on other
// hosts: each host's agent receives the version's files and stores them in
// its own binary store once every file matches the SHA-256 of the local
// manifest (agentapi.Client.PushBinary). A host that already holds a
// verified copy of the same etcd receives nothing. The local copy is
// verified first: a damaged one is pushed nowhere.
//
// Every host is tried, several at once, with one progress line each. When
// some fail, the error wraps ErrPushIncomplete and names them with their
// addresses; the result says what each host got.
func Push(ctx context.Context, c Cluster, version string, opt Options) (PushResult, error) {
	v, err := binaries.NormalizeVersion(version)
	if err != nil {
		return PushResult{}, err
	}
	store := opt.Store
	if store == nil {
		store = binaries.Open(c.Spec.BinaryStoreDir(c.Dir))
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Minute
	}
	res := PushResult{Version: v, Store: store.Dir, Hosts: []HostPush{}}
	hosts, err := pushHosts(c, opt.Hosts)
	if err != nil {
		return res, err
	}
	if _, err := store.Verify(ctx, v); err != nil {
		if errors.Is(err, binaries.ErrNotFound) && v == binaries.EmbeddedVersion() {
			return res, fmt.Errorf("%w: etcd %s has no copy in the binary store %s to push: it is the version built into steward, and each host runs it from its own steward binary; to push a copy, import one here first",
				binaries.ErrNotFound, v, store.Dir)
		}
		return res, fmt.Errorf("etcd %s was pushed to no host: %w", v, err)
	}

	c.Progress.Say("pushing etcd %s from %s to %d host(s): %s", v, store.Dir, len(hosts), strings.Join(hosts.Names(), ", "))
	var mu sync.Mutex // serialises progress lines
	rs := hostset.Each(ctx, hosts, hostset.Options{Limit: pushParallel}, func(ctx context.Context, a spec.Agent) (HostPush, error) {
		hp := HostPush{Host: a.Name, Address: a.Host, Endpoint: a.Endpoint()}
		start := time.Now()
		out, err := pushOne(ctx, c, a.Name, store, v, opt.Timeout, opt.Replace)
		hp.Duration = time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			hp.Result, hp.Error, hp.Err = PushFailed, err.Error(), err
			c.Progress.Say("host %s (%s): etcd %s not pushed: %v", hp.Host, hp.Address, v, err)
		case out.Result == PushPresent:
			hp.Result, hp.Binary = PushPresent, out.Binary
			c.Progress.Say("host %s (%s): etcd %s already there (same sha256, verified): %s", hp.Host, hp.Address, v, out.Binary)
		default:
			hp.Result, hp.Binary = PushInstalled, out.Binary
			c.Progress.Say("host %s (%s): etcd %s installed and verified (%s) in %s: %s",
				hp.Host, hp.Address, v, strings.Join(out.Tools, ", "), hp.Duration.Round(time.Millisecond), out.Binary)
		}
		return hp, nil
	})
	res.Hosts = make([]HostPush, len(rs))
	for i, r := range rs {
		res.Hosts[i] = r.Value
		if r.Err != nil {
			// Never called: the context ended before its turn.
			res.Hosts[i] = HostPush{Host: r.Host.Name, Address: r.Host.Host, Endpoint: r.Host.Endpoint(), Result: PushFailed, Error: r.Err.Error(), Err: r.Err}
		}
	}

	// Each host's failure kept as an error, so that the command finds
	// what it advises on in them (an unreachable agent).
	var failed listError
	for _, h := range res.Hosts {
		if h.Result == PushFailed {
			failed = append(failed, fmt.Errorf("%s (%s): %w", h.Host, h.Address, h.Err))
		}
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("%w: etcd %s is not on %d of %d host(s): %w",
			ErrPushIncomplete, v, len(failed), len(res.Hosts), failed)
	}
	return res, nil
}

// listError is errors said on one line, "; " between them.
type listError []error

func (l listError) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (l listError) Unwrap() []error { return l }

// pushOne pushes version to one host's agent within timeout.
func pushOne(ctx context.Context, c Cluster, host string, store *binaries.Store, v string, timeout time.Duration, replace bool) (agentapi.BinaryPush, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ac, err := c.Agent(host)
	if err != nil {
		return agentapi.BinaryPush{}, err
	}
	if replace {
		return ac.PushBinaryReplacing(ctx, store, v)
	}
	return ac.PushBinary(ctx, store, v)
}

// pushHosts returns the hosts to push to: those named (checked against the
// spec, each once, in the spec's order), else every agent on another host.
func pushHosts(c Cluster, named []string) (hostset.Hosts, error) {
	remote := hostset.Remote(c.Spec)
	if len(remote) == 0 {
		return nil, fmt.Errorf("%w: every agent of %s runs on this machine, and its members run from this machine's store", ErrNoHosts, c.SpecPath)
	}
	if len(named) == 0 {
		return remote, nil
	}
	for _, n := range named {
		if slices.Contains(remote.Names(), n) {
			continue
		}
		if _, ok := c.Spec.Agent(n); ok {
			return nil, fmt.Errorf("agent %s runs on this machine: its members run from this machine's store (hosts: %v)", n, remote.Names())
		}
		return nil, fmt.Errorf("host %q is not in %s (hosts: %v)", n, c.SpecPath, remote.Names())
	}
	return remote.Filter(func(a spec.Agent) bool { return slices.Contains(named, a.Name) }), nil
}
