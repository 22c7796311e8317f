package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/datadir"
)

// Checks a coordinator asks of the host, because they need what only the
// host has: its binary store and its members' data dirs.

// CheckBinary reports whether the agent's binary store can run etcd
// version (resolved, and a stored copy verified against its SHA-256), with
// the stored copy's sums.
func (a *Agent) CheckBinary(ctx context.Context, version string) agentapi.BinaryCheck {
	store := binaries.Open(a.opts.BinaryStore)
	out := agentapi.BinaryCheck{Version: version, Store: store.Dir}
	ex, err := store.Resolve(version)
	if err != nil {
		// A result, not an error: not advised here (Options.Advise); the
		// kind lets the coordinator's command advise it.
		out.Problem = err.Error()
		if p, ok := binaries.ProblemOf(err); ok {
			out.ProblemKind = p.Kind
		}
		return out
	}
	out.Binary = ex.Path
	if _, err := store.Verify(ctx, version); err != nil && !(errors.Is(err, binaries.ErrNotFound) && ex.Embedded) {
		// The embedded version needs no stored copy; a stored one must verify.
		out.Problem = err.Error()
	}
	if !ex.Embedded {
		// What a coordinator compares with its own copy before pushing.
		out.Files, _ = store.Sums(version)
	}
	return out
}

// CheckV2Store runs etcd's own check before 3.6 (`etcdutl check v2store`
// of version) on a copy of a member's data dir: the tool refuses a data
// dir in use, and the copy leaves the member untouched. An empty problem
// means the v2 store holds membership data only.
func (a *Agent) CheckV2Store(ctx context.Context, name, version string) (agentapi.V2StoreCheck, error) {
	m, ok := a.member(name)
	if !ok {
		return agentapi.V2StoreCheck{}, errNotFound(name)
	}
	m.mu.Lock()
	store, dataDir := m.cfg.BinaryStore, m.cfg.DataDir
	m.mu.Unlock()
	util, err := binaries.Open(store).Tool(version, "etcdutl")
	if err != nil {
		return agentapi.V2StoreCheck{}, badRequest{fmt.Errorf("%w, so etcd's v2 store check cannot run on this host: import etcd %s with its etcdutl", err, version)}
	}
	problem, err := datadir.CheckV2Store(ctx, util, dataDir, a.opts.Dir)
	if err != nil || problem == "" {
		return agentapi.V2StoreCheck{}, err
	}
	return agentapi.V2StoreCheck{Problem: fmt.Sprintf("etcdutl check v2store on a copy of %s: %s", name, problem)}, nil
}
