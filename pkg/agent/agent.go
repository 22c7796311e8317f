// Package agent is the per-host agent: it owns the etcd members on its host,
// starts them with the right flags, restarts them when they crash, stops
// them gracefully, swaps their binary version, and serves a small JSON API
// (see package agentapi) on a Unix socket in the Steward directory.
//
// The agent never runs etcd in its own process: each member is a child
// process (the steward binary re-executed as `steward etcd`, or a binary
// from the store), so a member crash or a version swap cannot take the agent
// down. Members keep running if the agent dies; a new agent adopts them.
package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/datadir"
)

// Options configure an agent.
type Options struct {
	// Name is the agent's name in the cluster spec.
	Name string
	// Dir is the Steward directory.
	Dir string
	// Socket is the Unix socket path (default DIR/run/agent.sock).
	Socket string
	Log    *slog.Logger
	// BeforeStop runs when the agent is shutting down, before it stops its
	// members (the backup loop stores what it received while etcd is up).
	BeforeStop func()
	// NewestBackup returns the newest backed-up revision (0: unknown); the
	// data dir check before each start compares the data dir with it.
	NewestBackup func() int64
	// Listen, when set, is the host address (HOST:PORT) the API is also
	// served on, over mutual TLS with TLS (pki.AgentServerTLS): an agent
	// that joined a multi-host cluster.
	Listen string
	TLS    *tls.Config
	// BinaryStore is the store members run from when their config names
	// none (members a coordinator on another host configured); default
	// DIR/binaries.
	BinaryStore string
	// Advise, when set, adds the command layer's advice to the errors
	// the agent returns over its API and records as a member's last error
	// (the `steward agent` command passes cli.LibraryAdvice): the agent
	// names no command, and its clients read its errors as text, so the
	// words go in here.
	Advise func(error) error
	// CertDir, when set, is the certificate directory of a joined host
	// (DIR/pki): the coordinator renews its leaves over the API
	// (PUT /v1/certs/{name}, pki.Install). Empty on a coordinator's
	// machine, whose directory renews itself.
	CertDir string
	// ListenHost, when set, is the address members listen on (an IP
	// address, or 0.0.0.0) while they advertise their config's URLs: the
	// pod mode of a member pod, whose URLs name its DNS name
	// (NAME-I.NAME-peer.NAMESPACE.svc...), which etcd cannot bind. Listen
	// then names this address too (the command builds it so).
	ListenHost string
	// ClusterToken, when set, is the token of the cluster the agent's
	// host joined: a spec of another cluster is refused (SetCluster).
	ClusterToken string
	// KubeManifests, when set, is the host's static pod manifests
	// directory (kubeadm's /etc/kubernetes/manifests, as this process
	// reaches it): the agent serves /v1/kube/manifests
	// (kubemanifests.go).
	KubeManifests string
}

// Agent supervises the members on one host.
//
// Goroutines: Run's (the API server, then shutdown), one HTTP handler per
// request, and each member's own (see member). opts and log never change
// after New.
type Agent struct {
	opts Options
	log  *slog.Logger // safe for concurrent use
	// startedAt is written by Run before the API server starts serving,
	// and only read by handlers (Info) after that.
	startedAt time.Time

	// mu guards the members map only; each member has its own lock, taken
	// after mu when both are needed (never mu while holding a member's).
	mu      sync.Mutex
	members map[string]*member // guarded by mu

	// certMu serializes the installs of renewed certificates into
	// opts.CertDir (two pushes of one leaf must not interleave their
	// .prev and certificate writes). It guards no field.
	certMu sync.Mutex

	// countsMu serializes the merges of pushed recovery counts into
	// DIR/status/recovery-counts.json (PutRecoveryCounts: read, merge,
	// write). It guards no field.
	countsMu sync.Mutex

	// kubeMu serializes the writes of static pod manifests and their
	// kept copies (kubemanifests.go). It guards no field.
	kubeMu sync.Mutex

	shutdownOnce sync.Once
	shutdownCh   chan struct{} // closed once by Shutdown; Run waits on it
}

// ErrSocketPathTooLong refuses to run with a socket path above the Unix
// socket limit (it is Options.Socket, by default under Options.Dir).
var ErrSocketPathTooLong = errors.New("agent socket path too long")

// SocketPath is the default socket path for a Steward directory.
func SocketPath(dir string) string { return filepath.Join(dir, "run", "agent.sock") }

// SocketPathFor is the default socket of a named agent: agent.sock for the
// local agent, agent-NAME.sock for others sharing the directory.
func SocketPathFor(dir, name string) string {
	if name == "" || name == "local" {
		return SocketPath(dir)
	}
	return filepath.Join(dir, "run", "agent-"+name+".sock")
}

// membersDir holds this agent's member configs: each agent sharing a
// Steward directory (several agents on one host in tests) owns its own.
func (a *Agent) membersDir() string {
	if a.opts.Name == "local" {
		return filepath.Join(a.opts.Dir, "agent", "members")
	}
	return filepath.Join(a.opts.Dir, "agent", a.opts.Name, "members")
}

// New returns an agent. Run starts it.
func New(o Options) *Agent {
	if o.Name == "" {
		o.Name = "local"
	}
	if o.Socket == "" {
		o.Socket = SocketPathFor(o.Dir, o.Name)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BinaryStore == "" {
		o.BinaryStore = filepath.Join(o.Dir, "binaries")
	}
	return &Agent{opts: o, log: o.Log.With("agent", o.Name), members: map[string]*member{}, shutdownCh: make(chan struct{})}
}

// advise is err with the command layer's advice (Options.Advise).
func (a *Agent) advise(err error) error {
	if err == nil || a.opts.Advise == nil {
		return err
	}
	return a.opts.Advise(err)
}

func (a *Agent) runDir() string { return filepath.Join(a.opts.Dir, "run") }
func (a *Agent) configPath(name string) string {
	return filepath.Join(a.membersDir(), name+".json")
}
func (a *Agent) logPath(name string) string { return filepath.Join(a.opts.Dir, "logs", name+".log") }
func (a *Agent) pidPath(name string) string { return filepath.Join(a.runDir(), name+".pid") }

// Run serves the API until ctx is done or a shutdown request arrives; then it
// stops every member and returns.
func (a *Agent) Run(ctx context.Context) error {
	a.startedAt = time.Now()
	for _, d := range []string{a.runDir(), filepath.Join(a.opts.Dir, "logs"), a.membersDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	if len(a.opts.Socket) > 100 {
		return fmt.Errorf("%w: %s is %d bytes, above the Unix socket limit", ErrSocketPathTooLong, a.opts.Socket, len(a.opts.Socket))
	}
	lock := "agent.lock"
	if a.opts.Name != "local" {
		lock = "agent-" + a.opts.Name + ".lock"
	}
	unlock, err := lockFile(filepath.Join(a.runDir(), lock))
	if err != nil {
		return err
	}
	defer unlock()
	if err := a.loadMembers(); err != nil {
		return err
	}
	// The mutual-TLS listener first, the socket last: a caller that finds
	// the socket answering (the local commands, the tests' hosts) finds
	// the agent API of another host's agent listening too.
	var tlsLn net.Listener
	if a.opts.Listen != "" {
		if a.opts.TLS == nil {
			return fmt.Errorf("agent: listening on %s needs TLS", a.opts.Listen)
		}
		tlsLn, err = tls.Listen("tcp", a.opts.Listen, a.opts.TLS)
		if err != nil {
			return fmt.Errorf("agent: listen on %s: %w", a.opts.Listen, err)
		}
	}
	_ = os.Remove(a.opts.Socket)
	ln, err := net.Listen("unix", a.opts.Socket)
	if err != nil {
		if tlsLn != nil {
			tlsLn.Close()
		}
		return fmt.Errorf("agent: listen on %s: %w", a.opts.Socket, err)
	}
	if err := os.Chmod(a.opts.Socket, 0o600); err != nil {
		ln.Close()
		if tlsLn != nil {
			tlsLn.Close()
		}
		return fmt.Errorf("agent: %w", err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("api server", "err", err)
		}
	}()
	if tlsLn != nil {
		go func() {
			if err := srv.Serve(tlsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("api server (mTLS)", "err", err)
			}
		}()
	}
	a.log.Info("agent running", "dir", a.opts.Dir, "socket", a.opts.Socket, "listen", a.opts.Listen, "pid", os.Getpid())

	select {
	case <-ctx.Done():
	case <-a.shutdownCh:
	}
	if a.opts.BeforeStop != nil {
		a.opts.BeforeStop()
	}
	a.log.Info("agent shutting down: stopping members")
	a.stopAll()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = os.Remove(a.opts.Socket)
	a.log.Info("agent stopped")
	return nil
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	ms := make([]*member, 0, len(a.members))
	for _, m := range a.members {
		ms = append(ms, m)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), stopGrace+10*time.Second)
			defer cancel()
			if err := m.stop(ctx, false); err != nil {
				a.log.Error("stop member", "member", m.name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// loadMembers reads the persisted member configs, adopts members that are
// still running from an earlier agent, and starts the ones desired running.
func (a *Agent) loadMembers() error {
	dir := a.membersDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		var p persisted
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("agent: member config %s is corrupt: %w", e.Name(), err)
		}
		m := newMember(a, p.Config)
		// adopt is set before any other goroutine can see m; Run serves
		// the API only after loadMembers.
		adopt := a.runningPID(p.Config)
		m.adopt = adopt
		a.mu.Lock()
		a.members[p.Config.Name] = m
		a.mu.Unlock()
		if p.Desired == "running" {
			if err := m.start(); err != nil {
				return err
			}
		} else if adopt > 0 {
			// Not wanted running, but running: stop it.
			m.mu.Lock()
			m.desired = true
			m.loopDone = make(chan struct{})
			m.mu.Unlock()
			go m.loop()
			if err := m.stop(context.Background(), true); err != nil {
				return err
			}
		}
	}
	return nil
}

// runningPID returns the pid of a member process left by an earlier agent.
func (a *Agent) runningPID(cfg agentapi.MemberConfig) int {
	b, err := os.ReadFile(a.pidPath(cfg.Name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !proc.HasArg(pid, "--data-dir="+cfg.DataDir) {
		return 0
	}
	return pid
}

func (a *Agent) member(name string) (*member, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.members[name]
	return m, ok
}

// Info describes the agent.
func (a *Agent) Info() agentapi.AgentInfo {
	return agentapi.AgentInfo{
		Name: a.opts.Name, PID: os.Getpid(), StewardDir: a.opts.Dir,
		EmbeddedEtcdVersion: binaries.EmbeddedVersion(), StartedAt: a.startedAt,
		Capabilities: a.capabilities(),
	}
}

func (a *Agent) capabilities() []string {
	caps := []string{agentapi.CapRebuildDataDirs, agentapi.CapRecoveryCoordinated}
	if a.opts.KubeManifests != "" {
		caps = append(caps, agentapi.CapKubeManifests)
	}
	return caps
}

// Members returns every member's status, sorted by name.
func (a *Agent) Members() []agentapi.MemberStatus {
	a.mu.Lock()
	ms := make([]*member, 0, len(a.members))
	for _, m := range a.members {
		ms = append(ms, m)
	}
	a.mu.Unlock()
	out := make([]agentapi.MemberStatus, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PutMember stores a member's config. A running member keeps running with
// its old config until it is restarted.
func (a *Agent) PutMember(cfg agentapi.MemberConfig) (agentapi.MemberStatus, error) {
	cfg = a.resolvePaths(cfg)
	if err := ValidateConfig(cfg); err != nil {
		return agentapi.MemberStatus{}, err
	}
	a.mu.Lock()
	m, ok := a.members[cfg.Name]
	if !ok {
		for _, o := range a.members {
			// o.cfg is guarded by o.mu (PutMember and SwapVersion write
			// it holding only that lock).
			o.mu.Lock()
			used := o.cfg.DataDir == cfg.DataDir
			o.mu.Unlock()
			if used {
				a.mu.Unlock()
				return agentapi.MemberStatus{}, fmt.Errorf("member %s: data dir %s is already used by member %s", cfg.Name, cfg.DataDir, o.name)
			}
		}
		m = newMember(a, cfg)
		a.members[cfg.Name] = m
	}
	a.mu.Unlock()
	m.mu.Lock()
	m.cfg = cfg
	err := m.persistLocked()
	m.mu.Unlock()
	if err != nil {
		return agentapi.MemberStatus{}, err
	}
	return m.status(), nil
}

// resolvePaths makes a config's paths absolute: relative ones are relative
// to the agent's directory (a coordinator on another host knows this
// host's layout, not where it lives), and an empty binary store is the
// agent's own.
func (a *Agent) resolvePaths(cfg agentapi.MemberConfig) agentapi.MemberConfig {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(a.opts.Dir, p)
	}
	cfg.DataDir = abs(cfg.DataDir)
	if cfg.BinaryStore == "" {
		cfg.BinaryStore = a.opts.BinaryStore
	}
	cfg.BinaryStore = abs(cfg.BinaryStore)
	if t := cfg.TLS; t != nil {
		r := *t
		r.CA, r.ServerCert, r.ServerKey = abs(t.CA), abs(t.ServerCert), abs(t.ServerKey)
		r.PeerCert, r.PeerKey = abs(t.PeerCert), abs(t.PeerKey)
		r.ClientCert, r.ClientKey = abs(t.ClientCert), abs(t.ClientKey)
		cfg.TLS = &r
	}
	return cfg
}

// DeleteMember stops a member and forgets its config. Its data dir is kept.
func (a *Agent) DeleteMember(ctx context.Context, name string) error {
	_, err := a.DeleteMemberAside(ctx, name, "")
	return err
}

// DeleteMemberAside is DeleteMember that then moves the member's data dir
// aside (DATADIR.REASON-STAMP; nothing is deleted) when reason is set, and
// returns where it went ("" when there was none).
func (a *Agent) DeleteMemberAside(ctx context.Context, name, reason string) (string, error) {
	m, ok := a.member(name)
	if !ok {
		return "", errNotFound(name)
	}
	if err := m.stop(ctx, true); err != nil {
		return "", err
	}
	m.mu.Lock()
	dataDir := m.cfg.DataDir
	m.mu.Unlock()
	a.mu.Lock()
	delete(a.members, name)
	a.mu.Unlock()
	if err := os.Remove(a.configPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if reason == "" {
		return "", nil
	}
	aside, err := datadir.MoveAside(dataDir, reason)
	if err != nil {
		return "", fmt.Errorf("member %s forgotten, but its data dir could not be moved aside: %w", name, err)
	}
	return aside, nil
}

// MoveDataDirAside moves a stopped member's data dir aside (nothing is
// deleted) and returns where it went ("" when there was none).
func (a *Agent) MoveDataDirAside(name, reason string) (string, error) {
	cfg, err := a.stoppedConfig(name, "moving its data dir aside")
	if err != nil {
		return "", err
	}
	return datadir.MoveAside(cfg.DataDir, reason)
}

// stoppedConfig returns the config of member name, which must be stopped
// (no process, not desired running) before what is done to its data dir.
func (a *Agent) stoppedConfig(name, what string) (agentapi.MemberConfig, error) {
	m, ok := a.member(name)
	if !ok {
		return agentapi.MemberConfig{}, errNotFound(name)
	}
	m.mu.Lock()
	cfg, running := m.cfg, m.proc != nil || m.desired
	m.mu.Unlock()
	if running {
		return agentapi.MemberConfig{}, badRequest{fmt.Errorf("member %s runs (or is to run): stop it before %s", name, what)}
	}
	return cfg, nil
}

// CheckDataDir inspects a member's data dir without etcd (datadir.Check).
func (a *Agent) CheckDataDir(name string) (datadir.Finding, error) {
	m, ok := a.member(name)
	if !ok {
		return datadir.Finding{}, errNotFound(name)
	}
	m.mu.Lock()
	dataDir := m.cfg.DataDir
	m.mu.Unlock()
	return datadir.Check(dataDir), nil
}

// SwapVersion stops a member, switches it to another etcd version and starts it.
func (a *Agent) SwapVersion(ctx context.Context, name string, req agentapi.VersionRequest) (agentapi.MemberStatus, error) {
	version := req.Version
	m, ok := a.member(name)
	if !ok {
		return agentapi.MemberStatus{}, errNotFound(name)
	}
	m.mu.Lock()
	store := m.cfg.BinaryStore
	dataDir := m.cfg.DataDir
	allow := m.cfg.AllowMinorDowngrade || req.AllowMinorDowngrade
	m.mu.Unlock()
	if _, err := binaries.Open(store).Resolve(version); err != nil {
		return agentapi.MemberStatus{}, fmt.Errorf("swap member %s to etcd %s: %w", name, version, err)
	}
	if rec, ok, err := datadir.ReadRecord(dataDir); err != nil {
		return agentapi.MemberStatus{}, err
	} else if ok {
		if err := CheckVersionStep(rec.Version, version, allow); err != nil {
			return agentapi.MemberStatus{}, fmt.Errorf("swap member %s to etcd %s: %w", name, version, err)
		}
	}
	if err := m.stop(ctx, false); err != nil {
		return agentapi.MemberStatus{}, err
	}
	m.mu.Lock()
	m.cfg.Version = version
	m.downgradeOnce = req.AllowMinorDowngrade
	m.mu.Unlock()
	if err := m.start(); err != nil {
		return agentapi.MemberStatus{}, err
	}
	return m.status(), nil
}

// Shutdown asks Run to stop every member and return.
func (a *Agent) Shutdown() {
	a.shutdownOnce.Do(func() { close(a.shutdownCh) })
}

type notFoundError struct{ name string }

func (e notFoundError) Error() string {
	return fmt.Sprintf("member %q is not run by this agent", e.name)
}

func errNotFound(name string) error { return notFoundError{name} }

// lockFile takes an exclusive lock so two agents never share a directory.
func lockFile(path string) (func(), error) {
	l, err := filelock.TryLock(path)
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("another agent is already running for %s (lock %s held)", filepath.Dir(filepath.Dir(path)), path)
	}
	if err != nil {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	return l.Release, nil
}
