package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/portcheck"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/pki"
)

// Supervision policy.
const (
	// stopGrace is how long a member has to exit after SIGTERM before SIGKILL.
	stopGrace = 15 * time.Second
	// drainGrace is how long a member that does not lead has after SIGTERM:
	// etcd stops accepting requests at once and finishes the unary ones in
	// flight within milliseconds, but its graceful stop then waits its
	// request timeout (7 s) for clients' watch streams to end, which they
	// never do by themselves; clientv3 re-opens them on another member.
	drainGrace = 500 * time.Millisecond
	// leaderCheckTimeout bounds asking a member whether it leads.
	leaderCheckTimeout = time.Second
	// idleWait bounds the wait, before SIGTERM, for a moment when a member
	// that does not lead has no unary request in flight: a write proposed
	// just before leadership moved can take longer than drainGrace.
	idleWait = time.Second
	// busyGrace replaces drainGrace when that moment did not come.
	busyGrace = 3 * time.Second
	// healthyRun is how long a member must run for its crash count to reset.
	healthyRun = 30 * time.Second
	// crashLoopAfter consecutive quick exits make the state CrashLoopBackOff.
	crashLoopAfter = 3
	maxBackoff     = 30 * time.Second
)

// member supervises one etcd member process.
//
// Invariant: at most one process runs per member; loopDone is non-nil
// exactly while the supervision loop runs, and only the loop starts
// processes.
//
// Goroutines: the supervision loop (loop, one at a time), its awaitReady
// and process waiters, and the API handlers (status, start, halt, and the
// agent's PutMember and SwapVersion). Every field below mu is guarded by
// mu; a and name never change. Nothing holding mu takes the agent's lock
// (lock order: Agent.mu, then member.mu).
type member struct {
	a *Agent
	// name is cfg.Name, fixed at creation (a config update finds the
	// member by name, so it never renames it): read it without mu, e.g.
	// for log lines and errors.
	name string

	mu sync.Mutex
	// cfg is the desired config: written by PutMember and SwapVersion;
	// the loop copies it under mu before each launch and uses the copy.
	cfg     agentapi.MemberConfig // guarded by mu
	desired bool                  // guarded by mu; true: keep running
	state   string                // guarded by mu
	// proc is the running process, set and cleared by the loop; others
	// read it under mu (halt signals it, awaitReady compares it).
	proc         *process               // guarded by mu
	adopt        int                    // guarded by mu; pid of a process to adopt on the loop's first turn
	restarts     int                    // guarded by mu; written by the loop
	consecutive  int                    // guarded by mu
	startedAt    time.Time              // guarded by mu; when the loop started proc
	lastExit     string                 // guarded by mu; written by the loop
	lastError    string                 // guarded by mu; written by the loop, awaitReady and setError
	binary       string                 // guarded by mu; written by launch
	runningCfg   *agentapi.MemberConfig // guarded by mu; config of the running process; nil for an adopted one
	dataDirCheck string                 // guarded by mu; written by launch
	// downgradeOnce lets the next launch run an older minor than the data
	// dir's version record (a swap during etcd's online downgrade). It is
	// not persisted: after an agent restart the swap must be asked again.
	// Guarded by mu; set by SwapVersion, consumed by launch.
	downgradeOnce bool
	// loopDone is guarded by mu: made by start when no loop runs, cleared
	// by the loop under mu as it ends, then closed by it (halt waits on
	// the channel it read under mu).
	loopDone chan struct{}
	// wake never changes (buffered, 1): poke sends without mu from any
	// goroutine; the loop's sleep receives.
	wake chan struct{}
}

func newMember(a *Agent, cfg agentapi.MemberConfig) *member {
	return &member{a: a, name: cfg.Name, cfg: cfg, state: agentapi.StateStopped, wake: make(chan struct{}, 1)}
}

// persisted is the agent's on-disk record of a member.
type persisted struct {
	Config  agentapi.MemberConfig `json:"config"`
	Desired string                `json:"desired"`
}

func (m *member) persistLocked() error {
	d := "stopped"
	if m.desired {
		d = "running"
	}
	b, err := json.MarshalIndent(persisted{Config: m.cfg, Desired: d}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(m.a.configPath(m.cfg.Name), b, 0o600)
}

func (m *member) status() agentapi.MemberStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := agentapi.MemberStatus{
		Name: m.cfg.Name, Version: m.cfg.Version, Binary: m.binary, State: m.state,
		Restarts: m.restarts, LastExit: m.lastExit, LastError: m.lastError,
		LogFile: m.a.logPath(m.cfg.Name), DataDir: m.cfg.DataDir,
		ClientURL: m.cfg.ClientURL, PeerURL: m.cfg.PeerURL, Desired: "stopped",
		DataDirCheck: m.dataDirCheck,
	}
	if m.desired {
		st.Desired = "running"
	}
	if m.proc != nil {
		st.PID = m.proc.pid
		st.StartedAt = m.startedAt
	}
	// runningCfg is set from the moment the loop takes a config to launch
	// until that process exits, so a config changed while the process was
	// still starting is reported as pending too.
	st.ConfigPending = m.runningCfg != nil && !reflect.DeepEqual(*m.runningCfg, m.cfg)
	if rec, ok, err := datadir.ReadRecord(m.cfg.DataDir); err == nil && ok {
		st.DataDirVersion = rec.Version
	}
	snaps, _ := filepath.Glob(filepath.Join(m.cfg.DataDir, "member", "snap", "*.snap"))
	for _, s := range snaps {
		if fi, err := os.Stat(s); err == nil && fi.ModTime().After(st.NewestSnapshot) {
			st.NewestSnapshot = fi.ModTime()
		}
	}
	return st
}

// start makes the member run and keeps it running.
func (m *member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.desired = true
	m.consecutive = 0
	if err := m.persistLocked(); err != nil {
		return err
	}
	if m.loopDone == nil {
		m.loopDone = make(chan struct{})
		go m.loop()
	} else {
		m.poke()
	}
	return nil
}

// stop stops the member. persist=false keeps the desired state on disk
// (the agent is shutting down, not the operator stopping a member).
//
// A member that does not lead (Steward moves leadership away before it
// stops a member on purpose) is drained: SIGTERM, then SIGKILL once
// drainGrace has passed. etcd is crash-safe: a write is acknowledged only
// once a quorum has it in its fsynced WAL, and the member replays its own
// WAL at its next start. A member that leads, or that does not say, gets
// the whole graceful stop (stopGrace): etcd hands its leadership over
// before it exits.
func (m *member) stop(ctx context.Context, persist bool) error {
	return m.halt(ctx, persist, m.graceFor(ctx))
}

// graceFor returns the time the running member has between SIGTERM and
// SIGKILL: drainGrace when it says it does not lead (its
// etcd_server_is_leader metric is 0) and, within idleWait, had a moment
// with no unary request in flight; busyGrace when it does not lead but had
// none; stopGrace when it leads, does not run, or does not answer within
// leaderCheckTimeout.
func (m *member) graceFor(ctx context.Context) time.Duration {
	follows, idle, inFlight := m.drainable(ctx)
	switch {
	case !follows:
		return stopGrace
	case !idle:
		m.a.log.Info("draining member: unary requests still in flight", "member", m.name, "inFlight", inFlight, "grace", busyGrace)
		return busyGrace
	default:
		return drainGrace
	}
}

// drainable tells whether the running member does not lead, and whether
// it had a moment with no unary request in flight within idleWait (else
// how many were in flight at the last look).
func (m *member) drainable(ctx context.Context) (follows, idle bool, inFlight int) {
	m.mu.Lock()
	p, cfg := m.proc, m.cfg
	if m.runningCfg != nil {
		cfg = *m.runningCfg // the URL the process listens on
	}
	m.mu.Unlock()
	if p == nil {
		return false, false, 0
	}
	hc, err := httpClientFor(cfg)
	if err != nil {
		return false, false, 0
	}
	mm, err := fetchMetrics(ctx, hc, cfg.ClientURL)
	if err != nil || !mm.leaderKnown || mm.leads {
		return false, false, 0
	}
	deadline := time.Now().Add(idleWait)
	for mm.inFlightUnary > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return true, false, mm.inFlightUnary
		case <-time.After(10 * time.Millisecond):
		}
		next, err := fetchMetrics(ctx, hc, cfg.ClientURL)
		if err != nil {
			return true, false, mm.inFlightUnary
		}
		mm = next
	}
	return true, mm.inFlightUnary == 0, mm.inFlightUnary
}

// memberMetrics is what stop reads of a member's metrics.
type memberMetrics struct {
	leads, leaderKnown bool // etcd_server_is_leader, and whether it was there
	// inFlightUnary is the unary gRPC requests started and not yet
	// handled (grpc_server_started_total minus grpc_server_handled_total).
	inFlightUnary int
}

func fetchMetrics(ctx context.Context, hc *http.Client, clientURL string) (memberMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderCheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clientURL, "/")+"/metrics", nil)
	if err != nil {
		return memberMetrics{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return memberMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memberMetrics{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads etcd's Prometheus text metrics.
func parseMetrics(r io.Reader) (memberMetrics, error) {
	var mm memberMetrics
	var started, handled float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		}
		switch name {
		case "etcd_server_is_leader", "grpc_server_started_total", "grpc_server_handled_total":
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return memberMetrics{}, fmt.Errorf("metric %s: %w", name, err)
		}
		switch {
		case name == "etcd_server_is_leader":
			mm.leads, mm.leaderKnown = v == 1, true
		case !strings.Contains(labels, `grpc_type="unary"`):
		case name == "grpc_server_started_total":
			started += v
		default:
			handled += v
		}
	}
	if err := sc.Err(); err != nil {
		return memberMetrics{}, err
	}
	mm.inFlightUnary = max(0, int(started-handled))
	return mm, nil
}

// halt stops the member: SIGTERM, then SIGKILL after grace; at once with
// SIGKILL when grace is 0. etcd is crash-safe (a write is in its fsynced
// WAL before it is acknowledged), but its graceful stop waits up to its
// request timeout (7 s by default) for clients' open streams to end (see
// stop).
func (m *member) halt(ctx context.Context, persist bool, grace time.Duration) error {
	m.mu.Lock()
	m.desired = false
	if persist {
		if err := m.persistLocked(); err != nil {
			m.mu.Unlock()
			return err
		}
	}
	p, done := m.proc, m.loopDone
	if p != nil {
		m.state = agentapi.StateStopping
	}
	m.poke()
	m.mu.Unlock()
	if p != nil {
		go p.terminate(grace)
	}
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop member %s: %w", m.name, ctx.Err())
	}
}

func (m *member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// loop starts the member, waits for it to exit, and restarts it with
// backoff while it is desired to run.
func (m *member) loop() {
	log := m.a.log.With("member", m.name)
	for {
		m.mu.Lock()
		if !m.desired {
			m.state = agentapi.StateStopped
			done := m.loopDone
			m.loopDone = nil
			m.mu.Unlock()
			close(done)
			return
		}
		cfg := m.cfg
		adopt := m.adopt
		m.adopt = 0
		// The config is fixed from here, before the process exists:
		// ConfigPending must be true for a config changed during launch.
		m.runningCfg = nil
		if adopt == 0 {
			m.runningCfg = &cfg
		}
		m.mu.Unlock()

		var p *process
		var err error
		fresh := false // the data dir was empty: p bootstraps a member
		if adopt > 0 {
			p = adoptProcess(adopt)
			log.Info("adopted running member", "pid", adopt)
		} else {
			p, fresh, err = m.launch(cfg)
		}
		if err != nil {
			log.Error("cannot start member", "err", err)
			m.mu.Lock()
			m.runningCfg = nil
			m.lastError = m.a.advise(err).Error()
			m.state = agentapi.StateFailed
			m.consecutive++
			delay := backoff(m.consecutive)
			m.mu.Unlock()
			m.sleep(delay)
			continue
		}

		m.mu.Lock()
		m.proc = p
		m.startedAt = time.Now()
		m.state = agentapi.StateStarting
		stopNow := !m.desired
		m.mu.Unlock()
		if stopNow {
			go p.terminate(stopGrace)
		}
		readyCtx, cancel := context.WithCancel(context.Background())
		go m.awaitReady(readyCtx, cfg, p)
		<-p.done
		cancel()
		_ = os.Remove(m.a.pidPath(cfg.Name))
		discardErr := ""
		if fresh {
			// An etcd that exits before it wrote its WAL (a join whose
			// peers did not answer or refused it, or a stop during its
			// bootstrap) leaves a member dir that launch's check would
			// refuse for good. It began empty and holds nothing, so the
			// next start bootstraps again. Done without mu: file I/O.
			if removed, err := datadir.DiscardFailedBootstrap(cfg.DataDir); err != nil {
				log.Error("member exited during its bootstrap", "err", err)
				discardErr = err.Error()
			} else if removed {
				log.Warn("member exited during its bootstrap; removed what it left in its data dir, which was empty, so that the next start bootstraps again", "exit", p.exit)
			}
		}

		m.mu.Lock()
		m.proc = nil
		m.runningCfg = nil
		if discardErr != "" {
			m.lastError = discardErr
		}
		if !m.desired {
			log.Info("member stopped", "exit", p.exit)
			m.mu.Unlock()
			continue
		}
		if time.Since(m.startedAt) >= healthyRun {
			m.consecutive = 0
		}
		m.consecutive++
		m.restarts++
		m.lastExit = p.exit
		if tail := logTail(m.a.logPath(cfg.Name), 3); tail != "" {
			m.lastExit += ": " + tail
		}
		m.state = agentapi.StateBackoff
		if m.consecutive >= crashLoopAfter {
			m.state = agentapi.StateCrashLoop
		}
		delay := backoff(m.consecutive)
		log.Warn("member exited unexpectedly; restarting", "exit", p.exit, "restarts", m.restarts, "delay", delay, "state", m.state)
		m.mu.Unlock()
		m.sleep(delay)
	}
}

func (m *member) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-m.wake:
	}
}

func backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := time.Second << (n - 1)
	if d > maxBackoff || d <= 0 {
		d = maxBackoff
	}
	return d
}

// launch checks that the member can start and starts its process. fresh
// tells that the data dir was empty: the process bootstraps a member.
func (m *member) launch(cfg agentapi.MemberConfig) (p *process, fresh bool, err error) {
	ex, err := binaries.Open(cfg.BinaryStore).Resolve(cfg.Version)
	if err != nil {
		return nil, false, err
	}
	if !ex.Embedded {
		// The file run is the file imported (cached: hashed again only
		// when the file changes).
		if err := binaries.CheckRecorded(ex.Path); err != nil {
			return nil, false, fmt.Errorf("refusing to start etcd %s: %w", cfg.Version, err)
		}
	}
	if rec, ok, err := datadir.ReadRecord(cfg.DataDir); err != nil {
		return nil, false, err
	} else if ok {
		m.mu.Lock()
		allow := cfg.AllowMinorDowngrade || m.downgradeOnce
		m.downgradeOnce = false
		m.mu.Unlock()
		if err := CheckVersionStep(rec.Version, cfg.Version, allow); err != nil {
			return nil, false, fmt.Errorf("refusing to start etcd %s on %s: %w", cfg.Version, cfg.DataDir, err)
		}
	}
	// Look at the data dir before etcd does: a dir with a member but no WAL
	// or no database would make etcd bootstrap a fresh member under the old
	// identity, which is how clusters get split.
	f := datadir.Check(cfg.DataDir)
	finding := f.String()
	if f.State == datadir.Valid && m.a.opts.NewestBackup != nil {
		if newest := m.a.opts.NewestBackup(); newest > f.Revision {
			// Not a refusal: the member replays its WAL and catches up from
			// its peers; but if the whole cluster is this far behind, writes
			// after revision f.Revision exist only in the backups.
			finding += fmt.Sprintf("; behind the newest backup (revision %d): it catches up from its WAL and peers, or else restore", newest)
		}
	}
	m.mu.Lock()
	m.dataDirCheck = finding
	m.mu.Unlock()
	m.a.log.Info("checked data dir", "member", cfg.Name, "finding", finding)
	if f.State == datadir.Invalid {
		return nil, false, &DataDirError{Member: cfg.Name, Msg: fmt.Sprintf("refusing to start: %s; rebuild it", f)}
	}
	if rec, ok, _ := datadir.ReadRecord(cfg.DataDir); ok && f.State == datadir.Empty {
		// An empty data dir next to a version record is data that was lost,
		// not a new member: started, etcd would bootstrap a blank member
		// under the old identity.
		return nil, false, lostDataError(cfg.DataDir, cfg.Name, rec)
	}
	for _, u := range []struct{ what, raw string }{{"client URL", cfg.ClientURL}, {"peer URL", cfg.PeerURL}} {
		if err := checkPortFree(ListenURL(u.raw, m.a.opts.ListenHost)); err != nil {
			return nil, false, fmt.Errorf("%s %s: %w", u.what, u.raw, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.DataDir), 0o700); err != nil {
		return nil, false, err
	}
	if err := os.Mkdir(cfg.DataDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, false, err
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, false, err
	}
	logf, err := os.OpenFile(m.a.logPath(cfg.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open member log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, runMarker+"%s etcd %s at %s ---\n", cfg.Name, cfg.Version, time.Now().UTC().Format(time.RFC3339))
	cat, err := catalogue.Load(filepath.Join(m.a.opts.Dir, catalogue.FileName))
	if err != nil {
		return nil, false, err
	}
	flags, err := EtcdFlagsListening(cfg, cat, m.a.opts.ListenHost)
	if err != nil {
		return nil, false, err
	}
	args := append(append([]string{}, ex.Args...), flags...)
	cmd := exec.Command(ex.Path, args...)
	// Only what etcd needs of the agent's environment: no secret, and no
	// ETCD_* variable, which etcd would read as a flag.
	cmd.Env = childenv.Etcd()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = filepath.Dir(cfg.DataDir)
	// Own process group: a signal to the agent's terminal does not reach members.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err = startProcess(cmd)
	if err != nil {
		return nil, false, fmt.Errorf("start %s: %w", ex.Path, err)
	}
	m.mu.Lock()
	m.binary = strings.TrimSpace(ex.Path + " " + strings.Join(ex.Args, " "))
	m.mu.Unlock()
	if err := atomicfile.WriteFile(m.a.pidPath(cfg.Name), []byte(strconv.Itoa(p.pid)+"\n"), 0o600); err != nil {
		m.a.log.Warn("write pid file", "member", cfg.Name, "err", err)
	}
	m.a.log.Info("started member", "member", cfg.Name, "version", cfg.Version, "pid", p.pid)
	return p, f.State == datadir.Empty, nil
}

// awaitReady polls the member's /version endpoint until it answers with the
// expected version, then marks it running and writes the version record.
func (m *member) awaitReady(ctx context.Context, cfg agentapi.MemberConfig, p *process) {
	hc, err := httpClientFor(cfg)
	if err != nil {
		m.setError(p, err.Error())
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v, err := fetchVersion(ctx, hc, cfg.ClientURL)
		if err != nil {
			continue
		}
		if v != cfg.Version {
			m.setError(p, fmt.Sprintf("binary reports etcd %s, want %s", v, cfg.Version))
			return
		}
		// The record is written before the state says Running, so whoever
		// sees Running (isolated.Run stops the member right after) knows the
		// data dir's record names this version.
		if err := datadir.WriteRecord(cfg.DataDir, cfg.Version, time.Now()); err != nil {
			m.setError(p, err.Error())
			return
		}
		m.mu.Lock()
		if m.proc == p && m.state == agentapi.StateStarting {
			m.state = agentapi.StateRunning
			m.lastError = ""
		}
		m.mu.Unlock()
		return
	}
}

func (m *member) setError(p *process, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == p {
		m.lastError = msg
	}
}

// memberClientTLS is the TLS config the agent reaches its member t with
// (its /version, its etcd API): the client certificate the config names,
// else, on a host that joined a cluster (it holds no admin client
// certificate), the member's server certificate, which allows client auth
// too.
func memberClientTLS(t *agentapi.TLSFiles) (*tls.Config, error) {
	cert, key := t.ClientCert, t.ClientKey
	if cert == "" {
		cert, key = t.ServerCert, t.ServerKey
	}
	return pki.ClientTLSFiles(t.CA, cert, key)
}

func httpClientFor(cfg agentapi.MemberConfig) (*http.Client, error) {
	tr := &http.Transport{}
	if t := cfg.TLS; t != nil {
		tc, err := memberClientTLS(t)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	} else {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}, nil
}

func fetchVersion(ctx context.Context, hc *http.Client, clientURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clientURL, "/")+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.Server, nil
}

// checkPortFree fails when another process listens on the URL's address.
func checkPortFree(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return portcheck.Free(u.Host)
}

// logTail explains a member's last exit from its log: the fatal or error
// line of the newest run when there is one (zap's JSON reduced to its
// message and error), else the run's last n lines.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	buf := make([]byte, max)
	k, _ := f.ReadAt(buf, off)
	text := string(buf[:k])
	if i := strings.LastIndex(text, runMarker); i >= 0 {
		text = text[i:]
		if j := strings.IndexByte(text, '\n'); j >= 0 {
			text = text[j+1:]
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	pick := ""
	for _, l := range lines {
		low := strings.ToLower(l)
		switch {
		case strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"panic"`) ||
			strings.HasPrefix(l, "panic:") || strings.Contains(low, "flag provided but not defined") ||
			strings.Contains(low, "invalid value"):
			pick = l
		case pick == "" && strings.Contains(l, `"level":"error"`):
			pick = l
		default:
			continue
		}
		if !strings.Contains(l, `"level":"error"`) {
			break
		}
	}
	if pick != "" {
		return shorten(zapSummary(pick))
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return shorten(strings.Join(lines, " | "))
}

// runMarker starts every run's section of a member log.
const runMarker = "--- steward agent: starting "

func zapSummary(line string) string {
	var z map[string]any
	if json.Unmarshal([]byte(line), &z) != nil {
		return strings.TrimSpace(line)
	}
	out := fmt.Sprint(z["msg"])
	if e, ok := z["error"]; ok {
		out += ": " + fmt.Sprint(e)
	}
	return out
}

func shorten(s string) string {
	if len(s) > 600 {
		return s[:600] + "..."
	}
	return s
}

// lostDataError refuses to start a member whose data dir is empty beside
// its version record. The record is written each time a start of etcd
// answers (awaitReady), so its time is the last start, not the
// last moment etcd ran.
func lostDataError(dataDir, name string, rec datadir.VersionRecord) error {
	return &DataDirError{Member: name, Msg: fmt.Sprintf("refusing to start: data dir %s is empty, but etcd %s was started on it (last at %s, by its version record): its data was lost; rebuild it",
		dataDir, rec.Version, rec.UpdatedAt.Format(time.RFC3339))}
}

// DataDirError refuses to start a member whose data dir cannot serve (etcd
// finds it invalid, or its data was lost): the message ends "rebuild it",
// and the command says how (cli.LibraryAdvice, through Options.Advise).
type DataDirError struct {
	Member string
	Msg    string
}

func (e *DataDirError) Error() string { return e.Msg }
