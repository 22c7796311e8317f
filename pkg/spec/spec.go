// Package spec defines the cluster spec (cluster.yaml): what a cluster is
// made of, where each member runs, and the etcd settings every member shares.
// The spec is the operator's source of truth; Steward validates it before it
// acts on it and rewrites it atomically when membership changes.
package spec

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// FileName is the name of the spec file inside the Steward directory.
const FileName = "cluster.yaml"

// LocalAgent is the name of the agent `steward up` runs on this host.
const LocalAgent = "local"

// Cluster is the cluster spec.
type Cluster struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name names the cluster; it is shown in status and used in certificates.
	Name string `json:"name"`
	// Token is the initial cluster token: it keeps two clusters that share
	// peers' addresses from joining each other by mistake.
	Token string `json:"token"`
	// Version is the etcd version members run, e.g. "3.6.16".
	Version string `json:"version"`
	// BinaryStore is the directory of the versioned etcd binary store.
	// Relative paths are relative to the Steward directory.
	BinaryStore string   `json:"binaryStore,omitempty"`
	TLS         TLS      `json:"tls"`
	Etcd        Etcd     `json:"etcd"`
	Backup      Backup   `json:"backup,omitempty"`
	Recovery    Recovery `json:"recovery,omitempty"`
	Agents      []Agent  `json:"agents"`
	Members     []Member `json:"members"`
	// PodHosts marks a cluster whose hosts are Kubernetes member pods
	// (written by Steward's operator): their addresses are DNS names that
	// resolve only while the pods run, so validation takes each name as
	// it is (one name, one host) instead of resolving it.
	PodHosts bool `json:"podHosts,omitempty"`
	// External marks a cluster Steward did not create and does not run
	// (written by `steward attach`): its members run under no agent, and
	// Steward reaches them with the operator's own client certificate.
	External *External `json:"external,omitempty"`
	// Timeline is the history the cluster serves, written by every restore
	// (and recovery that restores): each begins a new timeline branched off
	// the one restored (docs/backup.md#timelines). nil is timeline 1. It is
	// state, not configuration: the spec carries it so that every host's
	// backup loop tags what it stores with the timeline the commands see.
	Timeline *Timeline `json:"timeline,omitempty"`
}

// Timeline is the cluster's current timeline (backup.Lineage and
// backup.TimelineRecord in the backup store say the same).
type Timeline struct {
	// ID is the timeline's number (1: the first history).
	ID int64 `json:"id"`
	// Parent is the timeline it branched off and BranchRevision the last
	// revision they share (0 for a restore from a snapshot file).
	Parent         int64 `json:"parent,omitempty"`
	BranchRevision int64 `json:"branchRevision,omitempty"`
	// StartRevision is the revision etcd resumed above after the restore.
	StartRevision int64 `json:"startRevision,omitempty"`
}

// TimelineID is the cluster's current timeline: 1 when none is recorded.
func (c *Cluster) TimelineID() int64 {
	if c.Timeline == nil || c.Timeline.ID < 1 {
		return 1
	}
	return c.Timeline.ID
}

// External describes an attached cluster: one whose member processes
// someone else runs. Steward works on it through the etcd API only.
type External struct {
	// CAFile, CertFile and KeyFile are the operator's CA bundle and client
	// certificate and key, absolute paths. Steward reads them and never
	// rewrites them. All three are empty once Steward took over issuing
	// the cluster's certificates with the operator's CA (`steward certs
	// take-over`): it then dials with its certificate directory's files,
	// as on a cluster it created.
	CAFile   string `json:"caFile,omitempty"`
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ClusterID is the etcd cluster ID (hex) the endpoints answered with
	// when the cluster was attached.
	ClusterID string `json:"clusterID"`
}

// IsExternal reports whether the spec is of an attached cluster, whose
// members Steward does not run.
func (c *Cluster) IsExternal() bool { return c.External != nil }

// OperatorCerts reports whether the cluster runs on the operator's
// certificates: an attached cluster (its members adopted or not) whose
// certificate issuing Steward has not taken over.
func (c *Cluster) OperatorCerts() bool {
	return c.External != nil && (c.External.CAFile != "" || c.External.CertFile != "" || c.External.KeyFile != "")
}

// ClientFiles returns the CA, client certificate and client key files
// Steward dials etcd with: the operator's own for an attached cluster
// whose certificates are the operator's (OperatorCerts), else those of
// the certificate directory.
func (c *Cluster) ClientFiles(stewardDir string) (ca, cert, key string) {
	if e := c.External; e != nil && c.OperatorCerts() {
		return Path(stewardDir, e.CAFile), Path(stewardDir, e.CertFile), Path(stewardDir, e.KeyFile)
	}
	d := c.CertDir(stewardDir)
	return filepath.Join(d, "ca.crt"), filepath.Join(d, "client.crt"), filepath.Join(d, "client.key")
}

// TLS configures transport security. It is on unless Disabled is set.
type TLS struct {
	// Disabled turns TLS off for client and peer traffic. Anyone who can
	// reach an etcd client port without TLS owns the Kubernetes cluster
	// above it: only for throwaway test clusters.
	Disabled bool `json:"disabled,omitempty"`
	// CertDir holds ca.crt, server, peer and client certificates and keys.
	// Relative paths are relative to the Steward directory.
	CertDir string `json:"certDir,omitempty"`
	// CAValidity is the lifetime of the CA Steward creates, a Go duration
	// ("87600h", the default: 10 years). An existing CA keeps its own.
	CAValidity string `json:"caValidity,omitempty"`
	// LeafValidity is the lifetime of the leaves Steward issues: server,
	// peer, client, a host's and an issued client's (default "8760h": a
	// year). Minutes are allowed ("3m").
	LeafValidity string `json:"leafValidity,omitempty"`
	// RenewBefore is the renewal margin: a leaf with no more than this
	// left is renewed (default a third of LeafValidity: renewal at two
	// thirds of the lifetime). It must be shorter than LeafValidity.
	RenewBefore string `json:"renewBefore,omitempty"`
	// ExpiryWarning is the window in which an expiring certificate turns
	// the CertificatesReady condition False (default "720h", 30 days, cut
	// to half the renewal margin when that is shorter, so a leaf renewed
	// on time never warns).
	ExpiryWarning string `json:"expiryWarning,omitempty"`
	// ServerNames are more DNS names the server certificates of the
	// hosts' members carry (issued into the join files), for clients that
	// reach the members through a name in front of them: the operator's
	// client Service NAME-client.NAMESPACE.svc...
	ServerNames []string `json:"serverNames,omitempty"`
}

// Certificate lifetimes when the spec leaves them empty.
const (
	DefaultCAValidity    = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity  = 365 * 24 * time.Hour
	DefaultExpiryWarning = 30 * 24 * time.Hour
)

// CertValidity holds the certificate lifetimes of a spec, defaults applied.
type CertValidity struct {
	CA, Leaf, RenewBefore, ExpiryWarning time.Duration
}

// Validity returns the certificate lifetimes with defaults applied; an
// error names the first field that does not parse or cannot work
// (Validate reports them all).
func (t TLS) Validity() (CertValidity, error) {
	v, errs := t.validity()
	return v, errors.Join(errs...)
}

func (t TLS) validity() (CertValidity, []error) {
	var errs []error
	dur := func(field, raw string, def time.Duration) time.Duration {
		if raw == "" {
			return def
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("tls.%s %q: want a duration like 8760h or 3m", field, raw))
			return def
		}
		if d <= 0 {
			errs = append(errs, fmt.Errorf("tls.%s %q: must be positive", field, raw))
			return def
		}
		return d
	}
	v := CertValidity{
		CA:   dur("caValidity", t.CAValidity, DefaultCAValidity),
		Leaf: dur("leafValidity", t.LeafValidity, DefaultLeafValidity),
	}
	v.RenewBefore = dur("renewBefore", t.RenewBefore, v.Leaf/3)
	v.ExpiryWarning = dur("expiryWarning", t.ExpiryWarning, min(DefaultExpiryWarning, v.RenewBefore/2))
	if len(errs) > 0 {
		return v, errs
	}
	if v.RenewBefore >= v.Leaf {
		errs = append(errs, fmt.Errorf("tls.renewBefore %s is not shorter than tls.leafValidity %s: every leaf would be due for renewal as soon as it is issued; shorten renewBefore or lengthen leafValidity", v.RenewBefore, v.Leaf))
	}
	if v.Leaf > v.CA {
		errs = append(errs, fmt.Errorf("tls.leafValidity %s is longer than tls.caValidity %s: a leaf must not outlive its CA", v.Leaf, v.CA))
	}
	return v, errs
}

// Etcd holds the settings every member runs with.
type Etcd struct {
	// QuotaBackendBytes is the database size at which etcd raises NOSPACE.
	QuotaBackendBytes int64 `json:"quotaBackendBytes,omitempty"`
	// AutoCompactionMode is "periodic" or "revision".
	AutoCompactionMode string `json:"autoCompactionMode,omitempty"`
	// AutoCompactionRetention is a duration ("1h") for periodic mode or a
	// revision count for revision mode.
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`
	// SnapshotCount is the number of applied entries between raft snapshots.
	SnapshotCount uint64 `json:"snapshotCount,omitempty"`
	// HeartbeatIntervalMs and ElectionTimeoutMs tune raft timing.
	HeartbeatIntervalMs int `json:"heartbeatIntervalMs,omitempty"`
	ElectionTimeoutMs   int `json:"electionTimeoutMs,omitempty"`
	// ExtraFlags are passed to every member as --key=value.
	ExtraFlags map[string]string `json:"extraFlags,omitempty"`
}

// Backup configures where backups go.
type Backup struct {
	// Store is the directory backups are written to; relative paths are
	// relative to the Steward directory (default "backups"). Ignored when
	// S3 is set.
	Store string `json:"store,omitempty"`
	// S3 keeps backups in an S3-compatible bucket instead.
	S3 *S3 `json:"s3,omitempty"`
	// EncryptionKeyFile, when set, encrypts every backup with AES-256-GCM
	// under the key in that file (32 bytes raw, hex or base64; mode 0600).
	EncryptionKeyFile string `json:"encryptionKeyFile,omitempty"`
	// Continuous turns on continuous backups: the agent whose member leads
	// records every change as delta segments and takes full snapshots on
	// FullSchedule. `steward up` writes it true.
	Continuous bool `json:"continuous,omitempty"`
	// FullSchedule is a cron expression (5 fields) for full snapshots
	// (default "0 * * * *": hourly).
	FullSchedule string `json:"fullSchedule,omitempty"`
	// MaxDeltasPerFull takes a full snapshot when the delta chain since the
	// last one reaches this many segments (default 1000).
	MaxDeltasPerFull int `json:"maxDeltasPerFull,omitempty"`
	// DeltaMaxAgeMs closes a delta segment this long after its first event
	// (default 250): the recovery point objective.
	DeltaMaxAgeMs int `json:"deltaMaxAgeMs,omitempty"`
	// CompactAfter folds the newest full backup and its deltas into a new
	// full backup, from the backup store alone (off the live cluster), once
	// the chain after that full backup reaches either bound, so a restore
	// replays at most that much (nil: never compact).
	CompactAfter *CompactAfter `json:"compactAfter,omitempty"`
	// Compression is the zstd level full snapshots are stored with:
	// "fastest" (default: the closest to etcdctl snapshot save's speed),
	// "default" or "better" (smaller objects, more CPU while streaming).
	Compression string `json:"compression,omitempty"`
	// Retention says which full backups (with their deltas) to keep.
	Retention Retention `json:"retention,omitempty"`
	// StoreShared declares that Store is one directory every host of a
	// multi-host cluster reaches (a shared file system mounted at the same
	// path everywhere). Without it, a multi-host cluster needs S3.
	StoreShared bool `json:"storeShared,omitempty"`
}

// CompactAfter bounds the delta chain after a full backup before the
// backup leader folds it into a new full backup. A zero bound is no bound;
// at least one must be set.
type CompactAfter struct {
	// Deltas compacts once the chain holds this many delta segments.
	Deltas int `json:"deltas,omitempty"`
	// Bytes compacts once the chain's delta segments, as stored, add up to
	// this many bytes.
	Bytes int64 `json:"bytes,omitempty"`
}

// Recovery configures what the agent does when the cluster loses quorum.
type Recovery struct {
	// Mode is "manual" (default: report, the operator runs `steward
	// recover`) or "auto" (the agent runs the recovery itself once quorum
	// has been lost for GracePeriodSeconds).
	Mode string `json:"mode,omitempty"`
	// GracePeriodSeconds waits out restarts and short partitions (default 120).
	GracePeriodSeconds int `json:"gracePeriodSeconds,omitempty"`
}

// Retention keeps the last KeepLast full backups, plus the newest of each of
// the last KeepHourly hours and KeepDaily days (defaults 3, 24, 7).
type Retention struct {
	KeepLast   int `json:"keepLast,omitempty"`
	KeepHourly int `json:"keepHourly,omitempty"`
	KeepDaily  int `json:"keepDaily,omitempty"`
}

// S3 names an S3-compatible bucket for backups.
type S3 struct {
	// Endpoint is the server URL: https://host[:port] (http:// only for tests).
	Endpoint string `json:"endpoint"`
	Bucket   string `json:"bucket"`
	// Prefix is prepended to every object name (one prefix per cluster).
	Prefix string `json:"prefix,omitempty"`
	Region string `json:"region,omitempty"`
	// CredentialsFile holds AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=...
	// lines (mode 0600); empty means the environment variables.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// CAFile is a PEM bundle to trust for a server with a private CA.
	CAFile string `json:"caFile,omitempty"`
}

// BackupStoreDir returns the absolute backup directory.
func (c *Cluster) BackupStoreDir(stewardDir string) string {
	if c.Backup.Store == "" {
		return filepath.Join(stewardDir, "backups")
	}
	return Path(stewardDir, c.Backup.Store)
}

// Agent is a Steward agent: one per host.
//
// An agent on this machine (the single-host path) is reached on its Unix
// socket (Address). An agent on another host has a Host: the address that
// host's agent and members bind to and advertise; the agent serves its API
// there on Port over mutual TLS.
type Agent struct {
	Name string `json:"name"`
	// Address is where a local agent's API listens: unix:///path/agent.sock.
	// Empty for an agent with a Host.
	Address string `json:"address,omitempty"`
	// Host is the network address (IP or DNS name) of the agent's host.
	Host string `json:"host,omitempty"`
	// Port is the agent API's TCP port on Host (mutual TLS).
	Port int `json:"port,omitempty"`
	// MetricsAddress is HOST:PORT where the agent serves Prometheus
	// metrics at /metrics; empty serves none. On a loopback address
	// (127.0.0.0/8, ::1, localhost) it is plain HTTP, for a Prometheus on
	// the same machine; on any other address it is HTTPS with the agent's
	// serving certificate (cluster CA), unless tls.disabled. An agent on
	// another host serves metrics on its host's address or on loopback.
	MetricsAddress string `json:"metricsAddress,omitempty"`
}

// MetricsTLS reports whether the agent serves its metrics over TLS: on a
// non-loopback metrics address of a cluster with TLS on.
func (c *Cluster) MetricsTLS(a Agent) bool {
	return a.MetricsAddress != "" && !c.TLS.Disabled && !IsLoopback(a.MetricsAddress)
}

// MetricsURL is where Prometheus scrapes an agent ("" when it serves no
// metrics): http://HOST:PORT/metrics, or https:// when MetricsTLS.
func (c *Cluster) MetricsURL(a Agent) string {
	if a.MetricsAddress == "" {
		return ""
	}
	scheme := "http"
	if c.MetricsTLS(a) {
		scheme = "https"
	}
	return scheme + "://" + a.MetricsAddress + "/metrics"
}

// IsLoopback reports whether HOST:PORT names a loopback host.
func IsLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Remote reports whether the agent is reached over the network (it has a
// Host) rather than on a local Unix socket.
func (a Agent) Remote() bool { return a.Host != "" }

// Endpoint is where the agent's API answers: its Unix socket address, or
// https://HOST:PORT for an agent on another host.
func (a Agent) Endpoint() string {
	if a.Remote() {
		return "https://" + net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
	}
	return a.Address
}

// DefaultAgentPort is the agent API's port on a host when init is not told
// another.
const DefaultAgentPort = 2378

// Uses reports whether any member runs on the named agent.
func (c *Cluster) Uses(agent string) bool {
	for _, m := range c.Members {
		if m.Agent == agent {
			return true
		}
	}
	return false
}

// DefaultHost is the address a default spec's members listen on, and the
// local agent's new members when its members give no other.
const DefaultHost = "127.0.0.1"

// LocalAddress is the host of the first client URL of a member the local
// agent runs (a default spec's members share one), DefaultHost when no
// member runs there or its URL has no host: where a new local member
// listens by default.
func (c *Cluster) LocalAddress() string {
	for _, m := range c.Members {
		if m.Agent != LocalAgent {
			continue
		}
		if u, err := url.Parse(m.ClientURL); err == nil && u.Hostname() != "" {
			return u.Hostname()
		}
	}
	return DefaultHost
}

// MultiHost reports whether the spec places agents on other hosts.
func (c *Cluster) MultiHost() bool {
	for _, a := range c.Agents {
		if a.Remote() {
			return true
		}
	}
	return false
}

// Member is one etcd member.
type Member struct {
	Name string `json:"name"`
	// Agent names the agent that runs this member; empty for a member of
	// an attached (external) cluster, which no agent runs.
	Agent     string `json:"agent"`
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
	// DataDir is the member's data directory; relative paths are relative
	// to the Steward directory. Empty for a member of an attached cluster.
	DataDir string `json:"dataDir,omitempty"`
	// Bootstrap is set for members that joined a running cluster: how the
	// member must first start. Members of the initial cluster leave it empty.
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
	// Version, when set, overrides the cluster's version for this member.
	// Upgrade and rollback plans set it while members run mixed versions
	// and clear it when the step to the next version completes.
	Version string `json:"version,omitempty"`
	// Adopted is set for a member of an attached cluster that `steward
	// adopt` handed to an agent: how the member ran before, which the
	// agent keeps (its own certificates, token and settings). A member of
	// an attached cluster with an agent and Adopted is adopted; one
	// without an agent is still external.
	Adopted *Adopted `json:"adopted,omitempty"`
}

// Adopted is how an adopted member runs: what it ran with before Steward
// took it over, kept as it was. Paths are absolute, on the agent's host.
type Adopted struct {
	InitialCluster      string `json:"initialCluster"`
	InitialClusterToken string `json:"initialClusterToken"`
	// TLS is nil when the member ran without certificates, and once
	// Steward took over issuing the cluster's certificates (the external
	// block's files empty): the member then runs with the certificate
	// directory's files, as a member Steward created.
	TLS                     *AdoptedTLS       `json:"tls,omitempty"`
	QuotaBackendBytes       int64             `json:"quotaBackendBytes,omitempty"`
	AutoCompactionMode      string            `json:"autoCompactionMode,omitempty"`
	AutoCompactionRetention string            `json:"autoCompactionRetention,omitempty"`
	SnapshotCount           uint64            `json:"snapshotCount,omitempty"`
	HeartbeatIntervalMs     int               `json:"heartbeatIntervalMs,omitempty"`
	ElectionTimeoutMs       int               `json:"electionTimeoutMs,omitempty"`
	ExtraFlags              map[string]string `json:"extraFlags,omitempty"`
}

// AdoptedTLS are an adopted member's own certificate files.
type AdoptedTLS struct {
	CA         string `json:"ca"`
	ServerCert string `json:"serverCert"`
	ServerKey  string `json:"serverKey"`
	PeerCert   string `json:"peerCert"`
	PeerKey    string `json:"peerKey"`
	// PeerAllowedCN is the --peer-cert-allowed-cn the member ran with;
	// empty when it ran without one (its peer port accepted any
	// certificate of its CA), which the agent keeps.
	PeerAllowedCN string `json:"peerAllowedCN,omitempty"`
}

// IsAdopted reports whether the member is an adopted member of an attached
// cluster: run by an agent with the configuration it had before.
func (m Member) IsAdopted() bool { return m.Adopted != nil && m.Agent != "" }

// AllAdopted reports whether every member of an attached cluster is
// adopted: Steward then runs them all, and the cluster is Steward-run.
func (c *Cluster) AllAdopted() bool {
	if len(c.Members) == 0 {
		return false
	}
	for _, m := range c.Members {
		if !m.IsAdopted() {
			return false
		}
	}
	return true
}

// VersionOf returns the etcd version a member runs according to the spec.
func (c *Cluster) VersionOf(m Member) string {
	if m.Version != "" {
		return m.Version
	}
	return c.Version
}

// Bootstrap records how a member that joined a running cluster first starts.
type Bootstrap struct {
	// InitialCluster is the --initial-cluster value etcd's MemberAdd
	// returned when the member was added.
	InitialCluster string `json:"initialCluster"`
}

// Defaults for settings the spec leaves empty.
const (
	DefaultQuotaBackendBytes       = 2 << 30 // 2 GiB, etcd's default
	DefaultAutoCompactionMode      = "periodic"
	DefaultAutoCompactionRetention = "1h"
	DefaultSnapshotCount           = 10000
	DefaultHeartbeatIntervalMs     = 100
	DefaultElectionTimeoutMs       = 1000
)

// Load reads and parses a spec file. It does not validate it.
func Load(path string) (*Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cluster spec: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("parse cluster spec %s: %w", path, err)
	}
	return c, nil
}

// Parse parses a spec's YAML (unknown fields refused). It does not validate.
func Parse(b []byte) (*Cluster, error) {
	var c Cluster
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Save writes the spec atomically.
func (c *Cluster) Save(path string) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cluster spec: %w", err)
	}
	hdr := "# Steward cluster spec. Edit with care: see docs/cluster-spec.md.\n"
	return atomicfile.WriteFile(path, append([]byte(hdr), b...), 0o600)
}

// Clone returns a deep copy.
func (c *Cluster) Clone() *Cluster {
	b, err := yaml.Marshal(c)
	if err != nil {
		panic(err)
	}
	var out Cluster
	if err := yaml.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return &out
}

// Member returns the member with the given name.
func (c *Cluster) Member(name string) (*Member, bool) {
	for i := range c.Members {
		if c.Members[i].Name == name {
			return &c.Members[i], true
		}
	}
	return nil, false
}

// MemberNames lists member names in spec order.
func (c *Cluster) MemberNames() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Name)
	}
	return out
}

// Agent returns the agent with the given name.
func (c *Cluster) Agent(name string) (*Agent, bool) {
	for i := range c.Agents {
		if c.Agents[i].Name == name {
			return &c.Agents[i], true
		}
	}
	return nil, false
}

// ClientURLs lists every member's client URL.
func (c *Cluster) ClientURLs() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// InitialCluster is the --initial-cluster value for the members of the spec.
func (c *Cluster) InitialCluster() string {
	var parts []string
	for _, m := range c.Members {
		parts = append(parts, m.Name+"="+m.PeerURL)
	}
	return strings.Join(parts, ",")
}

// Path resolves a spec path against the Steward directory.
func Path(stewardDir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(stewardDir, p)
}

// CertDir returns the absolute certificate directory.
func (c *Cluster) CertDir(stewardDir string) string {
	if c.TLS.CertDir == "" {
		return filepath.Join(stewardDir, "pki")
	}
	return Path(stewardDir, c.TLS.CertDir)
}

// BinaryStoreDir returns the absolute binary store directory.
func (c *Cluster) BinaryStoreDir(stewardDir string) string {
	if c.BinaryStore == "" {
		return filepath.Join(stewardDir, "binaries")
	}
	return Path(stewardDir, c.BinaryStore)
}

// Scheme is "https" with TLS on and "http" with it off.
func (c *Cluster) Scheme() string {
	if c.TLS.Disabled {
		return "http"
	}
	return "https"
}

// ApplyDefaults fills the etcd settings left empty.
func (c *Cluster) ApplyDefaults() {
	if c.APIVersion == "" {
		c.APIVersion = "steward.etcd.io/v1alpha1"
	}
	if c.Kind == "" {
		c.Kind = "Cluster"
	}
	e := &c.Etcd
	if e.QuotaBackendBytes == 0 {
		e.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	if e.AutoCompactionMode == "" {
		e.AutoCompactionMode = DefaultAutoCompactionMode
	}
	if e.AutoCompactionRetention == "" {
		e.AutoCompactionRetention = DefaultAutoCompactionRetention
	}
	if e.SnapshotCount == 0 {
		e.SnapshotCount = DefaultSnapshotCount
	}
	if e.HeartbeatIntervalMs == 0 {
		e.HeartbeatIntervalMs = DefaultHeartbeatIntervalMs
	}
	if e.ElectionTimeoutMs == 0 {
		e.ElectionTimeoutMs = DefaultElectionTimeoutMs
	}
	b := &c.Backup
	if b.FullSchedule == "" {
		b.FullSchedule = "0 * * * *"
	}
	if b.MaxDeltasPerFull == 0 {
		b.MaxDeltasPerFull = 1000
	}
	if b.DeltaMaxAgeMs == 0 {
		b.DeltaMaxAgeMs = 250
	}
	if c.Recovery.Mode == "" {
		c.Recovery.Mode = "manual"
	}
	if c.Recovery.GracePeriodSeconds == 0 {
		c.Recovery.GracePeriodSeconds = 120
	}
	if b.Retention.KeepLast == 0 {
		b.Retention.KeepLast = 3
	}
	if b.Retention.KeepHourly == 0 {
		b.Retention.KeepHourly = 24
	}
	if b.Retention.KeepDaily == 0 {
		b.Retention.KeepDaily = 7
	}
}

// DefaultOptions shape the spec that `steward up` writes.
type DefaultOptions struct {
	Name       string
	Members    int
	Version    string
	StewardDir string
	TLSOff     bool
	// Host is the address members listen on (default DefaultHost).
	Host string
	// FreePort returns a port nobody listens on.
	FreePort func() (int, error)
	// NoMetrics leaves the local agent's metricsAddress empty: no
	// Prometheus metrics. By default the agent serves them on loopback
	// (DefaultMetricsAddress's rule).
	NoMetrics bool
}

// ErrTooFewMembers refuses a default spec of fewer than one member
// (DefaultOptions.Members).
var ErrTooFewMembers = errors.New("a cluster needs at least one member")

// NewDefault builds a spec of N members on one host with free ports.
func NewDefault(o DefaultOptions) (*Cluster, error) {
	if o.Members < 1 {
		return nil, fmt.Errorf("%w, got %d", ErrTooFewMembers, o.Members)
	}
	if o.Name == "" {
		o.Name = "steward"
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	tok := make([]byte, 8)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	c := &Cluster{
		Name:    o.Name,
		Token:   o.Name + "-" + hex.EncodeToString(tok),
		Version: o.Version,
		TLS:     TLS{Disabled: o.TLSOff},
		Backup:  Backup{Continuous: true},
		Agents: []Agent{{
			Name:    LocalAgent,
			Address: "unix://" + filepath.Join(o.StewardDir, "run", "agent.sock"),
		}},
	}
	c.ApplyDefaults()
	scheme := c.Scheme()
	used := map[int]bool{}
	port := func() (int, error) {
		for i := 0; i < 100; i++ {
			p, err := o.FreePort()
			if err != nil {
				return 0, err
			}
			if !used[p] {
				used[p] = true
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free port found")
	}
	for i := 1; i <= o.Members; i++ {
		cp, err := port()
		if err != nil {
			return nil, err
		}
		pp, err := port()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("etcd-%d", i)
		c.Members = append(c.Members, Member{
			Name:      name,
			Agent:     LocalAgent,
			ClientURL: fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(o.Host, fmt.Sprint(cp))),
			PeerURL:   fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(o.Host, fmt.Sprint(pp))),
			DataDir:   filepath.Join("members", name, "data"),
		})
	}
	if !o.NoMetrics {
		// Metrics on by default, as etcd's are, on loopback (plain HTTP
		// for a Prometheus on this machine): the members' address when it
		// is a loopback one (clusters side by side on 127.0.0.2, .3...
		// never share it), else 127.0.0.1; the port picked free here and
		// kept in the spec, as the members' ports are.
		mhost, free := o.Host, port
		if !IsLoopback(net.JoinHostPort(o.Host, "0")) {
			mhost, free = DefaultHost, FreePort(DefaultHost)
		}
		mp, err := free()
		if err != nil {
			return nil, err
		}
		c.Agents[0].MetricsAddress = net.JoinHostPort(mhost, strconv.Itoa(mp))
	}
	return c, nil
}

// Host names a host of a multi-host cluster and its network address.
type Host struct {
	Name    string
	Address string
}

// ParseHost parses NAME=ADDRESS.
func ParseHost(s string) (Host, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" || addr == "" {
		return Host{}, fmt.Errorf("host %q: want NAME=ADDRESS (for example cp-1=10.0.0.11)", s)
	}
	if !nameRE.MatchString(name) {
		return Host{}, fmt.Errorf("host name %q: use lower-case letters, digits and '-'", name)
	}
	if strings.ContainsAny(addr, "/ ") || strings.Contains(addr, "://") {
		return Host{}, fmt.Errorf("host %s address %q: want an IP address or DNS name, without scheme or port", name, addr)
	}
	return Host{Name: name, Address: addr}, nil
}

// HostsOptions shape the spec that `steward init` writes for several hosts.
type HostsOptions struct {
	Name    string
	Version string
	Hosts   []Host
	// Members defaults to one per host.
	Members int
	// PodHosts: the hosts are member pods (Cluster.PodHosts).
	PodHosts bool
	// ServerNames go into TLS.ServerNames.
	ServerNames []string
	// ClientPort, PeerPort and AgentPort default to 2379, 2380 and
	// DefaultAgentPort. A host with several members gives its k-th
	// member (from 0) ClientPort+10k and PeerPort+10k.
	ClientPort, PeerPort, AgentPort int
}

// ErrNoHosts refuses a multi-host spec of no hosts (HostsOptions.Hosts).
var ErrNoHosts = errors.New("no hosts: a multi-host spec needs at least one")

// NewMultiHost builds a spec of members spread over hosts, one agent per
// host, members placed round-robin in host order. It refuses no hosts
// (ErrNoHosts) and fewer than one member (ErrTooFewMembers; 0 is one per
// host).
func NewMultiHost(o HostsOptions) (*Cluster, error) {
	if len(o.Hosts) == 0 {
		return nil, ErrNoHosts
	}
	if o.Members == 0 {
		o.Members = len(o.Hosts)
	}
	if o.Members < 1 {
		return nil, fmt.Errorf("%w, got %d", ErrTooFewMembers, o.Members)
	}
	if o.Name == "" {
		o.Name = "steward"
	}
	if o.ClientPort == 0 {
		o.ClientPort = 2379
	}
	if o.PeerPort == 0 {
		o.PeerPort = 2380
	}
	if o.AgentPort == 0 {
		o.AgentPort = DefaultAgentPort
	}
	tok := make([]byte, 8)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	c := &Cluster{Name: o.Name, Token: o.Name + "-" + hex.EncodeToString(tok), Version: o.Version, PodHosts: o.PodHosts}
	c.TLS.ServerNames = o.ServerNames
	seen := map[string]bool{}
	for _, h := range o.Hosts {
		if seen[h.Name] {
			return nil, fmt.Errorf("host %s is given twice", h.Name)
		}
		seen[h.Name] = true
		c.Agents = append(c.Agents, Agent{Name: h.Name, Host: h.Address, Port: o.AgentPort})
	}
	c.ApplyDefaults()
	onHost := map[string]int{}
	for i := 1; i <= o.Members; i++ {
		h := o.Hosts[(i-1)%len(o.Hosts)]
		k := onHost[h.Name]
		onHost[h.Name]++
		name := fmt.Sprintf("etcd-%d", i)
		c.Members = append(c.Members, Member{
			Name:      name,
			Agent:     h.Name,
			ClientURL: "https://" + net.JoinHostPort(h.Address, strconv.Itoa(o.ClientPort+10*k)),
			PeerURL:   "https://" + net.JoinHostPort(h.Address, strconv.Itoa(o.PeerPort+10*k)),
			DataDir:   filepath.Join("members", name, "data"),
		})
	}
	return c, nil
}

// NextPorts returns the first client and peer ports, in the 10-apart
// series NewMultiHost uses, that no member of the spec uses on agent's host.
func (c *Cluster) NextPorts(agent string, clientPort, peerPort int) (int, int) {
	used := map[string]bool{}
	for _, m := range c.Members {
		if m.Agent != agent {
			continue
		}
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			if hp, err := HostPort(u); err == nil {
				_, p, _ := net.SplitHostPort(hp)
				used[p] = true
			}
		}
	}
	for k := 0; ; k++ {
		cp, pp := clientPort+10*k, peerPort+10*k
		if !used[strconv.Itoa(cp)] && !used[strconv.Itoa(pp)] {
			return cp, pp
		}
	}
}

// FreePort returns a function that picks free TCP ports on host, each
// different from the ones it picked before.
//
// Ports are drawn below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port from that range can be taken at
// any moment as the local port of some outgoing connection, so a member
// stopped for a while might not get its port back. Only when the range
// below is too small does it fall back to a kernel-chosen port.
func FreePort(host string) func() (int, error) {
	lo, hi := portRange()
	picked := map[int]bool{}
	return func() (int, error) {
		for range 200 {
			if hi-lo < 1000 {
				break
			}
			p := lo + mathrand.IntN(hi-lo)
			if picked[p] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				continue
			}
			l.Close()
			picked[p] = true
			return p, nil
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		defer l.Close()
		p := l.Addr().(*net.TCPAddr).Port
		picked[p] = true
		return p, nil
	}
}

// portRange is the range FreePort draws from: from 20000 (above the
// well-known and most registered service ports) to the start of the
// ephemeral range.
func portRange() (lo, hi int) {
	lo, hi = 20000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			hi = n
		}
	}
	return lo, hi
}

// HostPort returns the host:port of a URL.
func HostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
