// Package cluster is the handle every operation on a Steward cluster starts
// from: the opened spec, clients to etcd and to the agents, the read-only
// status and its conditions, the waits on them, and isolated runs of
// members on private client ports. Operations live in packages of their
// own (membership, maintenance, restore, backupd, recovery, upgrade,
// bootstrap); work on member processes goes through the agents (package
// agentapi), work on the cluster through etcd's own API.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Cluster is an open Steward directory and its spec.
type Cluster struct {
	// Dir is the absolute Steward directory.
	Dir string
	// Spec is the cluster spec, loaded from Dir/cluster.yaml.
	Spec *spec.Cluster
	// Progress receives one line per step of long operations; nil discards.
	Progress progress.Func
	// Runtimes, when set, hands out the runtime of an agent's members in
	// place of the agent's client (Runtime): a test's in-memory runtime.
	// ForStep keeps it.
	Runtimes func(agent string) (memberrt.Runtime, error)
}

// ErrNoSpec means the Steward directory holds no cluster spec.
var ErrNoSpec = errors.New("no cluster spec")

// Open loads and validates the spec of a Steward directory.
func Open(dir string) (*Cluster, error) {
	p := filepath.Join(dir, spec.FileName)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoSpec, p)
	}
	s, err := spec.Load(p)
	if err != nil {
		return nil, err
	}
	s.ApplyDefaults()
	c := &Cluster{Dir: dir, Spec: s}
	if _, err := c.ValidateSpec(s); err != nil {
		return nil, err
	}
	return c, nil
}

// ValidateSpec validates a spec for this Steward directory (binary versions
// resolved in its store) and returns its warnings.
func (c *Cluster) ValidateSpec(s *spec.Cluster) ([]string, error) {
	w, err := c.validate(s)
	if err != nil {
		return w, fmt.Errorf("invalid cluster spec %s:\n%w", filepath.Join(c.Dir, spec.FileName), err)
	}
	return w, nil
}

func (c *Cluster) validate(s *spec.Cluster) ([]string, error) {
	store := binaries.Open(s.BinaryStoreDir(c.Dir))
	return s.Validate(spec.ValidateOptions{KnownVersion: func(v string) error {
		_, err := store.Resolve(v)
		return err
	}})
}

// ValidateChange is ValidateSpec for a spec a command proposes (member
// add, a version recorded): its refusal says the change was refused and
// the spec file left as it is, not that the file is broken.
func (c *Cluster) ValidateChange(s *spec.Cluster) ([]string, error) {
	w, err := c.validate(s)
	if err != nil {
		return w, fmt.Errorf("change refused: the spec it would write is not valid (%s is unchanged):\n%w", filepath.Join(c.Dir, spec.FileName), err)
	}
	return w, nil
}

// SpecPath is the path of the spec file.
func (c *Cluster) SpecPath() string { return filepath.Join(c.Dir, spec.FileName) }

// SaveSpec validates and atomically writes a new spec, then adopts it.
// A backup.s3.caFile that does not verify the S3 server is refused
// (CheckS3CA). That check, the one that this is still the coordinator and
// the hand-over to the hosts (a multi-host cluster) get at most 15 s of ctx; once ctx has ended
// (the caller gave up) SaveSpec changes nothing and returns its error.
func (c *Cluster) SaveSpec(ctx context.Context, s *spec.Cluster) error {
	warnings, err := c.ValidateChange(s)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		c.Progress.Say("warning: %s", w)
	}
	bctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// A CA file that does not verify the S3 server is refused now, not
	// at the first backup on some host.
	if w, err := c.CheckS3CA(bctx, s); err != nil {
		return fmt.Errorf("refusing to change the spec: %w", err)
	} else if w != "" {
		c.Progress.Say("warning: %s", w)
	}
	if err := c.CheckAgentsCan(bctx, c.Spec, s); err != nil {
		return fmt.Errorf("refusing to change the spec: %w", err)
	}
	if err := c.CheckCoordinator(bctx); err != nil {
		return fmt.Errorf("refusing to change the spec: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("refusing to change the spec: %w", err)
	}
	if err := s.Save(c.SpecPath()); err != nil {
		return err
	}
	c.Spec = s
	// Hosts keep a copy for the daemons beside their agents. A host that
	// misses this one gets the spec with the next change or `steward up`.
	if err := c.PushSpec(bctx); err != nil {
		c.Progress.Say("warning: %v", err)
	}
	return nil
}

// CheckCoordinator fails with handover.ErrSuperseded when this is a
// multi-host coordinator another machine took over from (`steward
// takeover`): such a coordinator changes nothing and signs nothing. When
// the store cannot tell, it warns and lets the caller go on (the store may
// be down while the cluster still needs its coordinator). A cancelled ctx
// (the caller gave up) fails with its error, and no warning.
func (c *Cluster) CheckCoordinator(ctx context.Context) error {
	if c.Spec == nil || !c.Spec.MultiHost() {
		return nil
	}
	h, err := c.Handover(ctx)
	if err == nil {
		err = h.Check(ctx)
	}
	if errors.Is(err, handover.ErrSuperseded) {
		return err
	}
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	if err != nil {
		c.Progress.Say("warning: cannot check that this is still the coordinator: %v", err)
	}
	return nil
}

// CertDir is the absolute certificate directory.
func (c *Cluster) CertDir() string { return c.Spec.CertDir(c.Dir) }

// EnsureCerts generates or refreshes the certificates when TLS is on.
func (c *Cluster) EnsureCerts() error {
	if c.Spec.TLS.Disabled {
		return nil
	}
	if err := c.RequireProcessControl("issue member certificates"); err != nil {
		return err
	}
	if c.Spec.OperatorCerts() {
		// Every member is adopted and runs with the operator's own
		// certificate files: nothing of Steward's to issue (a CA made
		// here would be trusted by none of them).
		return nil
	}
	// Members on other hosts run with their host's own certificates
	// (pki.IssueHost, through the join file); these cover this machine's.
	var hosts []string
	for _, m := range c.Spec.Members {
		if a, ok := c.Spec.Agent(m.Agent); ok && a.Remote() {
			continue
		}
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			hp, err := spec.HostPort(u)
			if err != nil {
				return err
			}
			h, _, _ := net.SplitHostPort(hp)
			hosts = append(hosts, h)
		}
	}
	return pki.EnsureWith(c.CertDir(), c.Spec.Name, hosts, c.Validity())
}

// Validity is the certificate lifetimes of the spec (validated when the
// spec was opened; the defaults stand in for fields that do not parse).
func (c *Cluster) Validity() pki.Validity {
	v, _ := c.Spec.TLS.Validity()
	return pki.Validity{CA: v.CA, Leaf: v.Leaf, RenewBefore: v.RenewBefore}
}

// Client returns an etcd client for the given endpoints (all members when
// none are given).
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Spec.ClientURLs()
	}
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          3 * time.Second,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		Logger:               zap.NewNop(),
	}
	if !c.Spec.TLS.Disabled {
		tc, err := pki.ClientTLSFiles(c.clientFiles())
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}

// Agent returns a client for the named agent.
func (c *Cluster) Agent(name string) (*agentapi.Client, error) {
	a, ok := c.Spec.Agent(name)
	if !ok && name == "" && c.Spec.IsExternal() {
		return nil, c.RequireProcessControl("reach the process of a member")
	}
	if !ok {
		return nil, fmt.Errorf("agent %q is not in the cluster spec", name)
	}
	if !a.Remote() {
		return agentapi.NewClient(a.Address)
	}
	tc, err := pki.AgentClientTLS(c.CertDir(), a.Name)
	if err != nil {
		return nil, fmt.Errorf("agent %s on host %s: %w", a.Name, a.Host, err)
	}
	return agentapi.NewRemoteClient(a.Name, a.Host, a.Endpoint(), tc)
}

// ShutdownAgent asks the agent answering at address (unix://PATH, a
// socket of this machine's) to stop its members and itself, and returns
// its pid, for the caller to wait until it exits; 0 when no agent answers
// there (nothing asked). It needs no spec: bootstrap.Down stops whatever agent
// runs in a Steward directory, even one whose spec no longer loads.
func ShutdownAgent(ctx context.Context, address string) (int, error) {
	ac, err := agentapi.NewClient(address)
	if err != nil {
		return 0, err
	}
	info, err := ac.Info(ctx)
	if err != nil {
		return 0, nil
	}
	if err := ac.Shutdown(ctx); err != nil {
		return 0, fmt.Errorf("stop agent: %w", err)
	}
	return info.PID, nil
}

// AgentFor returns the client of the agent that runs a member.
func (c *Cluster) AgentFor(m spec.Member) (*agentapi.Client, error) {
	return c.Agent(m.Agent)
}

// Runtime returns the runtime of the named agent's members: the agent's
// client (Agent), unless Runtimes says otherwise.
func (c *Cluster) Runtime(agent string) (memberrt.Runtime, error) {
	if c.Runtimes != nil {
		return c.Runtimes(agent)
	}
	ac, err := c.Agent(agent)
	if err != nil {
		return nil, err
	}
	return ac, nil
}

// RuntimeFor returns the runtime that runs a member (AgentFor's twin).
func (c *Cluster) RuntimeFor(m spec.Member) (memberrt.Runtime, error) {
	return c.Runtime(m.Agent)
}

// MemberConfig builds the agent's run config of a spec member.
//
// A member of an agent on another host gets its paths relative to that
// agent's directory (the agent resolves them): its data dir as the spec
// writes it, its certificates by their names in the agent's pki directory,
// and no binary store (the agent's own). Absolute data dirs stay absolute.
func (c *Cluster) MemberConfig(m spec.Member) agentapi.MemberConfig {
	s := c.Spec
	remote := false
	if a, ok := s.Agent(m.Agent); ok && a.Remote() {
		remote = true
	}
	cfg := agentapi.MemberConfig{
		Name:                    m.Name,
		Version:                 s.VersionOf(m),
		BinaryStore:             s.BinaryStoreDir(c.Dir),
		DataDir:                 spec.Path(c.Dir, m.DataDir),
		ClientURL:               m.ClientURL,
		PeerURL:                 m.PeerURL,
		InitialClusterToken:     s.Token,
		QuotaBackendBytes:       s.Etcd.QuotaBackendBytes,
		AutoCompactionMode:      s.Etcd.AutoCompactionMode,
		AutoCompactionRetention: s.Etcd.AutoCompactionRetention,
		SnapshotCount:           s.Etcd.SnapshotCount,
		HeartbeatIntervalMs:     s.Etcd.HeartbeatIntervalMs,
		ElectionTimeoutMs:       s.Etcd.ElectionTimeoutMs,
		ExtraFlags:              s.Etcd.ExtraFlags,
	}
	if a := m.Adopted; a != nil {
		return c.adoptedConfig(m, cfg)
	}
	if m.Bootstrap != nil {
		cfg.InitialClusterState = "existing"
		cfg.InitialCluster = m.Bootstrap.InitialCluster
	} else {
		// Members of the initial cluster bootstrap it together. etcd reads
		// these flags only when the data dir is empty.
		cfg.InitialClusterState = "new"
		var initial spec.Cluster
		for _, o := range s.Members {
			if o.Bootstrap == nil {
				initial.Members = append(initial.Members, o)
			}
		}
		cfg.InitialCluster = initial.InitialCluster()
	}
	if !s.TLS.Disabled {
		f := pki.FilesIn(c.CertDir())
		cfg.TLS = &agentapi.TLSFiles{
			CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey,
			PeerCert: f.PeerCert, PeerKey: f.PeerKey, ClientCert: f.ClientCert, ClientKey: f.ClientKey,
		}
	}
	if remote {
		cfg.BinaryStore = ""
		cfg.DataDir = m.DataDir
		if cfg.TLS != nil {
			f := pki.FilesIn("pki")
			cfg.TLS = &agentapi.TLSFiles{
				CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey,
				PeerCert: f.PeerCert, PeerKey: f.PeerKey,
			}
		}
	}
	return cfg
}

// adoptedConfig is the run config of an adopted member: the one it ran
// with before (its own certificates, token and settings), with the
// operator's client certificate for the agent's health checks; once
// Steward took over issuing, the certificate directory's files instead. Its data
// dir holds the member already, and etcd reads the initial cluster flags
// only on an empty one: a member re-added with an empty data dir (member
// replace, recovery's reseed) joins the membership it was added to (its
// Bootstrap), never the one it was first started with (etcd refuses to
// join when the two differ, "member count is unequal").
func (c *Cluster) adoptedConfig(m spec.Member, cfg agentapi.MemberConfig) agentapi.MemberConfig {
	a := m.Adopted
	cfg.DataDir = m.DataDir
	cfg.InitialCluster, cfg.InitialClusterState, cfg.InitialClusterToken = a.InitialCluster, "existing", a.InitialClusterToken
	if m.Bootstrap != nil {
		cfg.InitialCluster = m.Bootstrap.InitialCluster
	}
	cfg.QuotaBackendBytes, cfg.SnapshotCount = a.QuotaBackendBytes, a.SnapshotCount
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = a.AutoCompactionMode, a.AutoCompactionRetention
	cfg.HeartbeatIntervalMs, cfg.ElectionTimeoutMs = a.HeartbeatIntervalMs, a.ElectionTimeoutMs
	cfg.ExtraFlags = a.ExtraFlags
	cfg.TLS = nil
	_, cert, key := c.clientFiles()
	switch {
	case a.TLS != nil:
		cfg.TLS = &agentapi.TLSFiles{CA: a.TLS.CA, ServerCert: a.TLS.ServerCert, ServerKey: a.TLS.ServerKey,
			PeerCert: a.TLS.PeerCert, PeerKey: a.TLS.PeerKey, ClientCert: cert, ClientKey: key,
			PeerAllowedCN: a.TLS.PeerAllowedCN, PeerAnyCN: a.TLS.PeerAllowedCN == ""}
	case !c.Spec.TLS.Disabled && !c.Spec.OperatorCerts():
		// Steward took over issuing: the certificate directory's files.
		f := pki.FilesIn(c.CertDir())
		cfg.TLS = &agentapi.TLSFiles{CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey,
			PeerCert: f.PeerCert, PeerKey: f.PeerKey, ClientCert: f.ClientCert, ClientKey: f.ClientKey}
	}
	return cfg
}

// Member returns the spec member of that name, or an error naming the ones
// that exist.
func (c *Cluster) Member(name string) (spec.Member, error) {
	if m, ok := c.Spec.Member(name); ok {
		return *m, nil
	}
	return spec.Member{}, fmt.Errorf("no member named %q in %s (members: %v)", name, c.SpecPath(), c.Spec.MemberNames())
}
