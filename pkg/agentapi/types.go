// Package agentapi is the agent's JSON API: the request and response types
// and a client. The API is plain HTTP with JSON bodies so it runs the same
// over the local Unix socket and, later, over mTLS between hosts.
//
// Endpoints:
//
//	GET    /v1/agent                   AgentInfo
//	GET    /v1/members                 []MemberStatus
//	GET    /v1/members/{name}          MemberStatus
//	PUT    /v1/members/{name}          MemberConfig -> MemberStatus (stores; does not start)
//	DELETE /v1/members/{name}          stop the member and forget it (data kept; ?aside=REASON moves its data dir aside) -> Aside
//	GET    /v1/members/{name}/datadir  the data dir inspected without etcd (datadir.Finding)
//	POST   /v1/members/{name}/datadir/aside  AsideRequest -> Aside: move a stopped member's data dir aside
//	PUT    /v1/members/{name}/datadir/stage  snapshot body, X-Steward-Stage: StageRequest -> Staged
//	POST   /v1/members/{name}/datadir/commit Staged -> Aside: the staged data dir in place, the old aside
//	POST   /v1/members/{name}/datadir/discard Staged: remove a staged data dir
//	GET    /v1/members/{name}/datadir/applied AppliedIndex of a stopped member's database and WAL
//	GET    /v1/members/{name}/datadir/db     a stopped member's database (application/octet-stream, X-Steward-SHA256: hex)
//	GET    /v1/members/{name}/freeport  Port: a free port on the member's host address
//	GET    /v1/kept                    the kept copies of data dirs on the host ([]datadir.Kept)
//	POST   /v1/kept/remove             KeptPath: remove one kept copy (400 for anything not named as one)
//	POST   /v1/members/{name}/start    start (and keep running)
//	POST   /v1/members/{name}/stop     stop gracefully (and keep stopped)
//	POST   /v1/members/{name}/kill     stop at once with SIGKILL (and keep stopped)
//	POST   /v1/members/{name}/restart  stop then start
//	POST   /v1/members/{name}/version  VersionRequest: swap binary version, restart
//	POST   /v1/members/{name}/check-v2store  V2StoreRequest -> V2StoreCheck
//	GET    /v1/binaries                BinaryList: the versions in the host's store with their recorded SHA-256
//	GET    /v1/binaries/{version}      BinaryCheck: can this host run that version
//	PUT    /v1/cluster                 ClusterFiles: the spec (and backup secrets) the host's daemons use
//	GET    /v1/backup/status           the host's backup loop reports (JSON objects as written)
//	GET    /v1/certs/{name}            CertFile: a joined host's current certificate (server, peer, agent, client)
//	PUT    /v1/certs/{name}            a renewal of it (PEM) -> CertRenewal; checked against the key and the CA (400 otherwise)
//	DELETE /v1/certs/{name}/prev       drop the previous certificate kept beside the renewal
//	PUT    /v1/ca                      the coordinator's trust bundle (PEM CA certificates) -> TrustBundle; checked against the host's leaves and the caller (400 otherwise)
//	PUT    /v1/binaries/{version}      a bundle (application/x-tar) -> BinaryPush: store that version (?replace=true: over another build)
//	POST   /v1/shutdown                stop every member and exit
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status.
//
// Pushing a version (PUT /v1/binaries/{version}) takes one request whose
// body is a bundle (pkg/binaries: WriteBundle, Receive): an uncompressed tar
// stream whose first entry, bundle.json, holds the version and the SHA-256
// of each file from the sender's store manifest, followed by the files
// themselves (etcd, and etcdctl and etcdutl when the version has them), as
// regular files named only so, each at most 256 MiB. The agent checks the
// version in the URL before it reads the body, writes the files into a
// temporary directory inside its binary store, checks each one's SHA-256
// against the manifest and etcd --version against the version, and only
// then renames the directory into place (etcd-vX.Y.Z with the store's
// manifest.json). A refusal (400) leaves the store as it was: a malformed
// bundle, another version, a sum that differs, a different etcd already
// stored under the version, or a damaged stored copy of the same etcd. A
// verified stored copy of the same etcd makes the push a no-op
// (BinaryPush.Result "present"). Client.PushBinary first asks GET
// /v1/binaries/{version} and sends nothing when the agent's copy already
// verifies with the same etcd sum.
package agentapi

import (
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/memberrt"
)

// The member types are the runtime's (package memberrt): the agent's API
// carries them as they are.
type (
	MemberConfig   = memberrt.MemberConfig
	TLSFiles       = memberrt.TLSFiles
	MemberStatus   = memberrt.MemberStatus
	VersionRequest = memberrt.VersionRequest
	BinaryCheck    = memberrt.BinaryCheck
	V2StoreCheck   = memberrt.V2StoreCheck
)

// Process states of a member as the agent sees it.
const (
	StateStopped   = memberrt.StateStopped
	StateStarting  = memberrt.StateStarting
	StateRunning   = memberrt.StateRunning
	StateBackoff   = memberrt.StateBackoff
	StateCrashLoop = memberrt.StateCrashLoop
	StateFailed    = memberrt.StateFailed
	StateStopping  = memberrt.StateStopping
)

// AgentInfo describes an agent.
type AgentInfo struct {
	Name                string    `json:"name"`
	PID                 int       `json:"pid"`
	StewardDir          string    `json:"stewardDir"`
	EmbeddedEtcdVersion string    `json:"embeddedEtcdVersion"`
	StartedAt           time.Time `json:"startedAt"`
	// Capabilities name what this agent can do beyond the endpoints every
	// agent serves (Cap*); an agent older than the field reports none.
	Capabilities []string `json:"capabilities,omitempty"`
}

// Capabilities an agent reports (AgentInfo.Capabilities).
const (
	// CapRebuildDataDirs: the agent serves a stopped member's applied
	// index and database (datadir/applied, datadir/db) and stages a data
	// dir with a version record (StageRequest.Version): what the offline
	// and restore upgrade strategies need of a member's host.
	CapRebuildDataDirs = "rebuild-datadirs"
	// CapRecoveryCoordinated: on a host of a multi-host cluster whose spec
	// says recovery.mode auto, the agent leaves the automatic recovery to
	// the coordinator. An older agent runs it itself when it is the spec's
	// first agent, from one host's view: a coordinator refuses to hand it
	// such a spec (cluster.CheckAgentsCan).
	CapRecoveryCoordinated = "recovery-auto-coordinated"
)

// AppliedIndex is a stopped member's applied and committed index.
type AppliedIndex = memberrt.AppliedIndex

// Results of a push (BinaryPush.Result).
const (
	// PushInstalled: the version was stored from the pushed bundle.
	PushInstalled = "installed"
	// PushPresent: the store already held a verified copy of the same
	// etcd; nothing changed.
	PushPresent = "present"
)

// BinaryPush is the agent's answer to a pushed version.
type BinaryPush struct {
	Version string `json:"version"`
	// Store is the agent's binary store, Binary the etcd server in it.
	Store  string   `json:"store"`
	Binary string   `json:"binary"`
	Tools  []string `json:"tools"`
	// Result is PushInstalled or PushPresent.
	Result string `json:"result"`
}

// BinaryList is the agent's binary store: each version with the SHA-256
// its manifest records (binaries.Store.Stored). The embedded version is
// not listed: every steward binary carries it.
type BinaryList struct {
	Store    string                   `json:"store"`
	Versions []binaries.StoredVersion `json:"versions"`
}

// V2StoreRequest names the etcd version whose etcdutl checks the v2 store.
type V2StoreRequest struct {
	Version string `json:"version"`
}

// ClusterFiles is what a coordinator hands a host's agent so the daemons
// beside it (the continuous backup loop) work there: the cluster spec as
// the coordinator has it, and the contents of the secret files it names.
// The agent writes the spec to its directory with its own paths (its
// binary store, its certificates, its copies of the secrets).
type ClusterFiles struct {
	Spec string `json:"spec"`
	// S3Credentials is the content of backup.s3.credentialsFile.
	S3Credentials string `json:"s3Credentials,omitempty"`
	// S3CA is the content of backup.s3.caFile: the PEM bundle of CA
	// certificates the host trusts for the S3 server instead of its
	// system roots. An agent that predates the field refuses a
	// hand-over carrying it (400, unknown field), so a host never falls
	// back to its system roots; it is sent only when the spec names one.
	S3CA string `json:"s3CA,omitempty"`
	// BackupKey is the content of backup.encryptionKeyFile.
	BackupKey string `json:"backupKey,omitempty"`
	// BackupAuthKey is the content of the coordinator's cluster backup key
	// (pki.BackupAuthKey), which authenticates backup manifests.
	BackupAuthKey string `json:"backupAuthKey,omitempty"`
}

// AsideRequest asks to move a data dir aside; Reason (a name) ends its new
// name: DATADIR.REASON-STAMP.
type AsideRequest struct {
	Reason string `json:"reason"`
}

// Aside says where a data dir was moved ("" when there was none).
type Aside struct {
	Aside string `json:"aside"`
}

// StageRequest goes with a snapshot sent to stage a member's data dir
// (header X-Steward-Stage, JSON): the cluster the member is restored into
// and the snapshot's SHA-256 (hex), which the agent checks. MemberIDs and
// ClusterID (memberrt.StageTarget) are sent only when the restored
// cluster keeps IDs its initial cluster does not derive: an agent older
// than them refuses the unknown fields (400) rather than staging a data
// dir with other IDs than its peers'.
type StageRequest struct {
	InitialCluster string            `json:"initialCluster"`
	MemberIDs      map[string]string `json:"memberIDs,omitempty"`
	ClusterID      string            `json:"clusterID,omitempty"`
	// Version, when set, is written as the staged dir's version record
	// (memberrt.StageTarget.Version); an agent without
	// CapRebuildDataDirs refuses it as an unknown field.
	Version string `json:"version,omitempty"`
	SHA256  string `json:"sha256"`
}

// Staged names a data dir the agent staged (or, in a commit request, the
// one to commit or discard).
type Staged struct {
	Staged string `json:"staged"`
}

// KeptPath names a kept copy of a data dir on the agent's host
// (DATADIR.KIND-STAMP, package datadir's Kept) to remove.
type KeptPath struct {
	Path string `json:"path"`
}

// Port is a free TCP port on the agent's host.
type Port struct {
	Port int `json:"port"`
}

// Error is the body of an error response.
type Error struct {
	Error string `json:"error"`
}

// CertFile is one of a joined host's current certificates (GET
// /v1/certs/{name}): the coordinator reissues it with the same key.
type CertFile struct {
	Name string `json:"name"`
	// PEM is the certificate, PEM-encoded (public: no key travels).
	PEM string `json:"pem"`
}

// CertRenewal is what an agent answers to a renewed certificate it
// installed (PUT /v1/certs/{name}): the file replaced on its host, the
// serial replaced and the new one (hex), and the new certificate's end.
type CertRenewal struct {
	Name      string    `json:"name"`
	File      string    `json:"file"`
	OldSerial string    `json:"oldSerial"`
	NewSerial string    `json:"newSerial"`
	NotAfter  time.Time `json:"notAfter"`
}

// TrustBundle is what an agent answers to a trust bundle it installed
// (PUT /v1/ca, during a CA rotation): its host's ca.crt, whether it
// changed (false when it held that bundle already) and the CAs it holds
// ("CN serial HEX").
type TrustBundle struct {
	File    string   `json:"file"`
	Changed bool     `json:"changed"`
	CAs     []string `json:"cas"`
}

// CapKubeManifests: the agent was given its host's static pod manifests
// directory (`steward agent --kube-manifests DIR`) and serves
// /v1/kube/manifests: a Kubernetes upgrade rewrites the control plane's
// manifests through it.
const CapKubeManifests = "kube-manifests"

// KubeManifest is one static pod manifest of the host
// (GET /v1/kube/manifests/{name}: name is the file's name without .yaml).
type KubeManifest struct {
	Name string `json:"name"`
	// Path is the file as the agent reaches it.
	Path    string `json:"path"`
	Content []byte `json:"content"`
}

// KubeManifestWrite is the answer to PUT /v1/kube/manifests/{name}?plan=ID.
type KubeManifestWrite struct {
	Name string `json:"name"`
	// Changed is false when the manifest already held the content.
	Changed bool `json:"changed"`
	// Kept is where the manifest before the plan's first write is kept
	// (DIR/kube-manifests-kept/PLAN/NAME.yaml) until the plan ends.
	Kept string `json:"kept,omitempty"`
}

// MaxKubeManifest bounds a manifest sent to an agent.
const MaxKubeManifest = 1 << 20
