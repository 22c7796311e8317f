// Package memberrt is the seam between operations and what runs members.
//
// A Runtime runs the etcd members of one place (today one agent: the
// agent's client, package agentapi, is the first implementation; the
// cluster handle hands one out with Cluster.Runtime and RuntimeFor). It
// holds only what operations call on members: their configs and states,
// start, stop, kill, restart, a version swap, the data dir work of a
// restore (stage, commit, discard; the applied index and a copy of a
// stopped member's database) and of a removal (delete aside), and
// the checks an upgrade makes first (a binary for a version, a data dir's
// v2 store). Logs are left out: the agent serves no endpoint for them
// (MemberStatus.LogFile names the file on its host).
//
// What concerns the host rather than its members stays on the agent's
// client (cluster.Agent): its certificates and trust bundle, pushed
// binaries, its copy of the spec, its backup loop's reports, its
// shutdown, the free ports of isolated runs and the inspection of a data
// dir. A runtime of Kubernetes pods has no host agent for those (they
// become Secrets, images, the operator's own state), so a second interface
// is left until that runtime shows which of them it needs.
package memberrt

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound means the runtime does not know the member. Errors of a
// runtime that say so match it (errors.Is).
var ErrNotFound = errors.New("member not found")

// StageTarget is the cluster a staged data dir is for: the initial
// cluster (every member's name=peerURL) and, when the cluster keeps IDs
// its initial cluster does not derive (members added at run time), each
// member's ID and the cluster ID, in hex as etcd prints them
// (datadir.Identity).
type StageTarget struct {
	InitialCluster string            `json:"initialCluster"`
	MemberIDs      map[string]string `json:"memberIDs,omitempty"`
	ClusterID      string            `json:"clusterID,omitempty"`
	// Version, when set, is written as the staged dir's version record
	// (the etcd version its data was last run on): an upgrade by restore
	// says the version the database came from, so the one-minor rule
	// holds from there. A restore leaves it empty (no record).
	Version string `json:"version,omitempty"`
}

// AppliedIndex compares what a stopped member's database holds with what
// its WAL committed (datadir.Applied): its database alone is complete
// only when Applied >= Committed.
type AppliedIndex struct {
	Applied   uint64 `json:"applied"`
	Committed uint64 `json:"committed"`
}

// ErrUnreachable means the runtime did not answer (an agent that is not
// running, or whose socket is stale): it cannot say what runs. Errors of a
// runtime that say so match it (errors.Is); the agent's client wraps it
// (agentapi.ErrUnreachable, "agent unreachable"). A caller that only needs
// to know nothing runs there may take it for "nothing running" (a restore
// then looks for processes on the data dirs itself).
var ErrUnreachable = errors.New("unreachable")

// IsNotFound reports whether err says the runtime does not know a member.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Runtime runs members. Every method names the member it acts on; the
// ones that act return the member's status afterwards. A member unknown
// to the runtime is an error matching ErrNotFound.
type Runtime interface {
	// Ping checks that the runtime answers within d.
	Ping(ctx context.Context, d time.Duration) error

	// Members lists the members the runtime runs; Member is one of them.
	Members(ctx context.Context) ([]MemberStatus, error)
	Member(ctx context.Context, name string) (MemberStatus, error)
	// PutMember stores a member's config without starting it (a running
	// member keeps running on its old config until it restarts).
	PutMember(ctx context.Context, cfg MemberConfig) (MemberStatus, error)
	// DeleteMember stops a member and forgets it, its data dir kept;
	// DeleteMemberAside also moves the data dir aside (reason names it)
	// and returns where it went.
	DeleteMember(ctx context.Context, name string) error
	DeleteMemberAside(ctx context.Context, name, reason string) (string, error)

	// Start starts a member and keeps it running; Stop stops it
	// gracefully, Kill at once (SIGKILL), and both keep it stopped;
	// Restart stops and starts it.
	Start(ctx context.Context, name string) (MemberStatus, error)
	Stop(ctx context.Context, name string) (MemberStatus, error)
	Kill(ctx context.Context, name string) (MemberStatus, error)
	Restart(ctx context.Context, name string) (MemberStatus, error)
	// SwapVersion runs a member on another etcd version (a restart).
	SwapVersion(ctx context.Context, name string, req VersionRequest) (MemberStatus, error)

	// StageDataDir stages a data dir for a stopped member from the
	// snapshot file at path snapshot (a local file) and returns the staged
	// dir; CommitDataDir puts it in place of the member's, the old one
	// moved aside (returned); DiscardStaged removes it.
	StageDataDir(ctx context.Context, name, snapshot string, to StageTarget) (string, error)
	CommitDataDir(ctx context.Context, name, staged string) (string, error)
	DiscardStaged(ctx context.Context, name, staged string) error
	// Applied reads a stopped member's applied and committed index;
	// FetchDatabase copies its database (member/snap/db) to the local
	// file dst (0600), checked against the digest the runtime sends. An
	// upgrade by restore picks the database that applied the most and
	// stages every member's new data dir from it.
	Applied(ctx context.Context, name string) (AppliedIndex, error)
	FetchDatabase(ctx context.Context, name, dst string) error

	// CheckBinary says whether the runtime can run etcd version;
	// CheckV2Store runs etcd version's v2 store check on a copy of a
	// member's data.
	CheckBinary(ctx context.Context, version string) (BinaryCheck, error)
	CheckV2Store(ctx context.Context, name, version string) (V2StoreCheck, error)
}
