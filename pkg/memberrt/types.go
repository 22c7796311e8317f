package memberrt

import "time"

// MemberConfig is everything a runtime needs to run one member.
type MemberConfig struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// BinaryStore is the directory of the versioned binary store.
	BinaryStore string `json:"binaryStore"`
	DataDir     string `json:"dataDir"`
	ClientURL   string `json:"clientURL"`
	PeerURL     string `json:"peerURL"`
	// InitialCluster and InitialClusterState ("new" or "existing") are
	// used by etcd only on the first start of an empty data dir.
	InitialCluster      string `json:"initialCluster"`
	InitialClusterState string `json:"initialClusterState"`
	InitialClusterToken string `json:"initialClusterToken"`
	// TLS is nil when TLS is off.
	TLS                     *TLSFiles         `json:"tls,omitempty"`
	QuotaBackendBytes       int64             `json:"quotaBackendBytes,omitempty"`
	AutoCompactionMode      string            `json:"autoCompactionMode,omitempty"`
	AutoCompactionRetention string            `json:"autoCompactionRetention,omitempty"`
	SnapshotCount           uint64            `json:"snapshotCount,omitempty"`
	HeartbeatIntervalMs     int               `json:"heartbeatIntervalMs,omitempty"`
	ElectionTimeoutMs       int               `json:"electionTimeoutMs,omitempty"`
	ExtraFlags              map[string]string `json:"extraFlags,omitempty"`
	// AllowMinorDowngrade lets an older minor version start on a data dir
	// last run by a newer one: only after etcd's own downgrade procedure.
	AllowMinorDowngrade bool `json:"allowMinorDowngrade,omitempty"`
	// ForceNewCluster starts etcd with --force-new-cluster: it drops every
	// other member from the membership its data dir records, keeping its
	// member and cluster IDs. Recovery uses it once, on a private client
	// port, to make one restored member a cluster of its own.
	ForceNewCluster bool `json:"forceNewCluster,omitempty"`
	// PrivateClientURL says ClientURL is a private one: no client is
	// sent there (a learner being added, until it votes and is restarted
	// on its own URL), so the member is never reported ready for clients.
	PrivateClientURL bool `json:"privateClientURL,omitempty"`
}

// TLSFiles are the certificate paths a member uses, where it runs (the
// agent's host).
type TLSFiles struct {
	CA         string `json:"ca"`
	ServerCert string `json:"serverCert"`
	ServerKey  string `json:"serverKey"`
	PeerCert   string `json:"peerCert"`
	PeerKey    string `json:"peerKey"`
	ClientCert string `json:"clientCert"`
	ClientKey  string `json:"clientKey"`
	// PeerAllowedCN is the one common name the peer port accepts
	// (--peer-cert-allowed-cn). Empty: the peer certificate's own common
	// name (Steward issues one peer certificate for every member), unless
	// PeerAnyCN.
	PeerAllowedCN string `json:"peerAllowedCN,omitempty"`
	// PeerAnyCN: the peer port accepts any certificate of its CA (no
	// --peer-cert-allowed-cn), as an adopted member that ran without one
	// did: kubeadm, for one, gives each member a peer certificate with a
	// name of its own, which a restriction to one name would refuse.
	PeerAnyCN bool `json:"peerAnyCN,omitempty"`
}

// Process states of a member as its runtime sees it.
const (
	StateStopped   = "Stopped"
	StateStarting  = "Starting"
	StateRunning   = "Running"
	StateBackoff   = "BackOff"          // exited; restarting after a delay
	StateCrashLoop = "CrashLoopBackOff" // exited repeatedly soon after start
	StateFailed    = "Failed"           // cannot be started until its config is fixed
	StateStopping  = "Stopping"
)

// MemberStatus is the runtime's view of one member process.
type MemberStatus struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Binary is the command that runs the member.
	Binary string `json:"binary"`
	// Desired is "running" or "stopped".
	Desired string `json:"desired"`
	State   string `json:"state"`
	PID     int    `json:"pid,omitempty"`
	// Restarts counts restarts after unexpected exits since the agent started.
	Restarts  int       `json:"restarts"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	// LastExit describes the last unexpected exit.
	LastExit string `json:"lastExit,omitempty"`
	// LastError is the last error the agent met running the member.
	LastError string `json:"lastError,omitempty"`
	// DataDirVersion is the etcd version last run successfully on the data
	// dir, from the version record next to it.
	DataDirVersion string `json:"dataDirVersion,omitempty"`
	// NewestSnapshot is when the newest raft snapshot file in the data
	// dir was written (zero: none).
	NewestSnapshot time.Time `json:"newestSnapshot,omitzero"`
	// DataDirCheck is what the check before the last start found.
	DataDirCheck string `json:"dataDirCheck,omitempty"`
	// ConfigPending is true when the running process was started with an
	// older config than the stored one; a restart applies the new one.
	ConfigPending bool   `json:"configPending,omitempty"`
	LogFile       string `json:"logFile"`
	DataDir       string `json:"dataDir"`
	ClientURL     string `json:"clientURL"`
	PeerURL       string `json:"peerURL"`
}

// VersionRequest asks the runtime to run a member on another etcd version.
type VersionRequest struct {
	Version string `json:"version"`
	// AllowMinorDowngrade lets this one start run an older minor version
	// than the data dir's version record: only after etcd's downgrade was
	// enabled (the data's storage version is already the older one).
	AllowMinorDowngrade bool `json:"allowMinorDowngrade,omitempty"`
}

// BinaryCheck says whether a host's binary store can run an etcd version.
type BinaryCheck struct {
	Version string `json:"version"`
	Store   string `json:"store"`
	Binary  string `json:"binary,omitempty"`
	// Problem is empty when the version resolves and verifies.
	Problem string `json:"problem,omitempty"`
	// ProblemKind is the kind of a stored binary's problem
	// (binaries.KindNotInStore, ...) when Problem is one: with Version,
	// Store and Problem it is the binaries.Problem, for the command to
	// name the command that fixes it (cli.CheckMessage).
	ProblemKind string `json:"problemKind,omitempty"`
	// Files are the SHA-256 sums of the stored copy's files, from its
	// manifest, when the store holds the version (not for the embedded
	// version run from the steward binary).
	Files map[string]string `json:"files,omitempty"`
}

// V2StoreCheck is the result of etcd's v2 store check on a member's data.
type V2StoreCheck struct {
	// Problem is empty when the v2 store holds membership data only.
	Problem string `json:"problem,omitempty"`
}
