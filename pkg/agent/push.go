package agent

import (
	"context"
	"errors"
	"io"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
)

// ReceiveBinary stores etcd version in the agent's binary store from a
// bundle a coordinator pushed (binaries.Store.Receive: every file checked
// against the bundle's SHA-256 sums before the version appears). The
// refusals of the bundle are bad requests; they leave the store as it was.
//
// With replace, a different etcd stored under the version (or a damaged
// copy) is moved aside and replaced once the pushed copy is checked
// (binaries.Store.ReceiveReplacing).
func (a *Agent) ReceiveBinary(ctx context.Context, version string, r io.Reader, replace bool) (agentapi.BinaryPush, error) {
	store := binaries.Open(a.opts.BinaryStore)
	receive := store.Receive
	if replace {
		receive = store.ReceiveReplacing
	}
	b, installed, err := receive(ctx, version, r)
	if err != nil {
		a.log.Warn("pushed etcd binaries refused", "version", version, "store", store.Dir, "err", err)
		for _, kind := range []error{binaries.ErrBadBundle, binaries.ErrChecksumMismatch, binaries.ErrDifferentBinary, binaries.ErrDamaged} {
			if errors.Is(err, kind) {
				return agentapi.BinaryPush{}, badRequest{err}
			}
		}
		return agentapi.BinaryPush{}, err
	}
	res := agentapi.BinaryPush{Version: b.Version, Store: store.Dir, Binary: b.Path, Tools: b.Tools, Result: agentapi.PushPresent}
	if installed {
		res.Result = agentapi.PushInstalled
	}
	a.log.Info("pushed etcd binaries", "version", b.Version, "store", store.Dir, "result", res.Result, "tools", b.Tools)
	return res, nil
}

// ListBinaries lists the versions of the agent's binary store with the
// SHA-256 their manifests record: what a coordinator compares with its own
// store (binaries.CompareStores).
func (a *Agent) ListBinaries() (agentapi.BinaryList, error) {
	store := binaries.Open(a.opts.BinaryStore)
	vs, err := store.Stored()
	return agentapi.BinaryList{Store: store.Dir, Versions: vs}, err
}
