package cluster

import (
	"context"
	"errors"
	"strings"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Binaries kept in step across hosts: a status asks every agent on another
// host for the versions of its store (agentapi.Client.ListBinaries, in
// parallel with the other probes and bounded by ProbeTimeout) and compares
// them with this machine's store (binaries.CompareStores): a host must
// hold the spec's version and every version this store holds, each with
// the same SHA-256. The status's AgentStatus.Binaries carries the outcome
// per host and its condition BinariesInStep sums it up (pkg/status).
// Agents on this machine run from this store and are not compared.

// States of a host's store (HostBinaries.State).
const (
	BinariesInStep  = "inStep"
	BinariesDiffer  = "differs"
	BinariesUnknown = "unknown"
)

// HostBinaries is how a host's binary store compares with this machine's.
// Its JSON field names are stable.
type HostBinaries struct {
	// State is BinariesInStep, BinariesDiffer or BinariesUnknown (the
	// agent did not answer, or is older than the listing).
	State string `json:"state"`
	binaries.StoreDiff
	// Error says why the state is unknown.
	Error string `json:"error,omitempty"`
}

// Summary is the host's difference in words ("" when in step).
func (h HostBinaries) Summary() string {
	var parts []string
	if len(h.Lacking) > 0 {
		parts = append(parts, "lacks etcd "+strings.Join(h.Lacking, ", "))
	}
	if len(h.Different) > 0 {
		parts = append(parts, "holds another build of etcd "+strings.Join(h.Different, ", "))
	}
	if h.State == BinariesUnknown {
		parts = append(parts, "unknown: "+h.Error)
	}
	return strings.Join(parts, "; ")
}

// CompareHostBinaries compares the store of every agent on another host
// with this machine's, concurrently, each bounded by ProbeTimeout (for the
// status, pkg/status). It returns nil when there is no such agent, or this
// machine may not ask them.
func (c *Cluster) CompareHostBinaries(ctx context.Context) map[string]*HostBinaries {
	remote := hostset.Remote(c.Spec)
	if len(remote) == 0 || !c.Admin() {
		return nil
	}
	local, lerr := binaries.Open(c.Spec.BinaryStoreDir(c.Dir)).Stored()
	var required []string
	if v := c.Spec.Version; v != "" && v != binaries.EmbeddedVersion() {
		required = []string{v}
	}
	rs := hostset.Each(ctx, remote, hostset.Options{Timeout: ProbeTimeout}, func(ctx context.Context, a spec.Agent) (agentapi.BinaryList, error) {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return agentapi.BinaryList{}, err
		}
		return ac.ListBinaries(ctx)
	})
	out := make(map[string]*HostBinaries, len(remote))
	for _, r := range rs {
		hb := &HostBinaries{State: BinariesUnknown}
		switch err := r.Err; {
		case lerr != nil:
			hb.Error = "this machine's binary store: " + lerr.Error()
		case errors.Is(err, agentapi.ErrNotServed):
			hb.Error = "the agent does not list its binaries (an older steward)"
		case err != nil:
			hb.Error = ShortErr(err)
			var ue *agentapi.UnreachableError
			if errors.As(err, &ue) {
				hb.Error = ue.Short()
			}
		default:
			hb.StoreDiff = binaries.CompareStores(local, required, r.Value.Versions)
			hb.State = BinariesInStep
			if !hb.InStep() {
				hb.State = BinariesDiffer
			}
		}
		out[r.Host.Name] = hb
	}
	return out
}
