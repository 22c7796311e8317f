package kubeletrt

// The Runner: the kubelet as a child of the host's agent.
//
// Invariants, enforced here:
//   - one kubelet at a time: a switch stops the running one (SIGTERM, then
//     SIGKILL after Config.StopTimeoutSeconds) and waits for its exit
//     before the next starts; a kubelet left by a killed agent (its PID in
//     the pid file, a process whose command line names kubelet) is stopped
//     before the first start;
//   - the version switched to is recorded (StateFile, atomically, 0600)
//     before the running kubelet is stopped, so an agent restarted at any
//     point starts the version last asked for, never an older one;
//   - a kubelet that exits is started again, after a pause that doubles
//     from MinBackoff to MaxBackoff while it keeps exiting within 10 s;
//   - the kubelet dies with the agent (Pdeathsig SIGTERM): its pods do
//     not (containerd runs them), and the next agent starts a kubelet that
//     takes them over.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// ErrNotReady: the runner has not read its config yet.
var ErrNotReady = errors.New("the kubelet runner is waiting for its config file")

// ErrStart: the switched-to kubelet could not be started.
var ErrStart = errors.New("kubelet did not start")

// Runner runs a host's kubelet as a child process (Run) and switches its
// version (SwitchKubelet). It implements Runtime.
//
// Goroutines: Run's (the only one that starts and stops processes), one
// waiter per process, and the callers of Kubelet and SwitchKubelet (the
// agent's handlers), which talk to Run through restart and mu.
type Runner struct {
	// ConfigPath, StateFile, PIDFile and DefaultLog are set before Run
	// and never change.
	ConfigPath string
	// StateFile records the version switched to ({"version": "vX.Y.Z"}).
	StateFile string
	// PIDFile records the running kubelet's PID.
	PIDFile    string
	DefaultLog string
	Log        *slog.Logger
	// ConfigPoll is how often a missing config file is looked for
	// (250 ms when zero); MinBackoff and MaxBackoff bound the pause
	// before a restart (1 s and 10 s when zero).
	ConfigPoll, MinBackoff, MaxBackoff time.Duration

	restartOnce sync.Once
	restart     chan struct{} // buffered 1: a switch asks Run to act

	mu       sync.Mutex
	cfg      *Config // guarded by mu; nil until Run read it
	st       Status  // guarded by mu
	desired  string  // guarded by mu: the version to run
	attempts int     // guarded by mu: starts tried, failed ones included
}

func (r *Runner) restartCh() chan struct{} {
	r.restartOnce.Do(func() { r.restart = make(chan struct{}, 1) })
	return r.restart
}

func (r *Runner) logger() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

type stateFile struct {
	Version string `json:"version"`
}

// ReadConfig reads and checks a config file.
func ReadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// waitConfig waits until the config file is there and valid.
func (r *Runner) waitConfig(ctx context.Context) (Config, bool) {
	r.mu.Lock()
	r.st = Status{State: StateWaiting, Config: r.ConfigPath}
	r.mu.Unlock()
	logged := ""
	for {
		c, err := ReadConfig(r.ConfigPath)
		if err == nil {
			return c, true
		}
		if msg := err.Error(); msg != logged {
			logged = msg
			if errors.Is(err, os.ErrNotExist) {
				r.logger().Info("kubelet: waiting for the config file", "config", r.ConfigPath)
			} else {
				r.logger().Error("kubelet: config file", "err", err)
				r.mu.Lock()
				r.st.LastError = msg
				r.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return Config{}, false
		case <-time.After(or(r.ConfigPoll, 250*time.Millisecond)):
		}
	}
}

// Run runs the kubelet until ctx ends, then stops it.
func (r *Runner) Run(ctx context.Context) {
	cfg, ok := r.waitConfig(ctx)
	if !ok {
		return
	}
	desired := cfg.Version
	if b, err := os.ReadFile(r.StateFile); err == nil {
		var s stateFile
		if json.Unmarshal(b, &s) == nil && CheckVersion(s.Version) == nil {
			desired = s.Version
		}
	}
	r.mu.Lock()
	r.cfg, r.desired = &cfg, desired
	r.st.Version, r.st.Binary = desired, cfg.Binary(desired)
	r.mu.Unlock()
	r.stopStale(cfg)
	minB, maxB := or(r.MinBackoff, time.Second), or(r.MaxBackoff, 10*time.Second)
	backoff := minB
	for {
		ver := r.version()
		cmd, exited, err := r.start(cfg, ver)
		if err != nil {
			r.logger().Error("kubelet: start", "version", ver, "err", err)
			r.mu.Lock()
			r.st.State, r.st.LastError, r.st.PID = StateFailed, err.Error(), 0
			r.mu.Unlock()
			if !r.pause(ctx, backoff) {
				r.setStopped()
				return
			}
			backoff = min(2*backoff, maxB)
			continue
		}
		started := time.Now()
		running := true
		for running {
			select {
			case <-ctx.Done():
				r.stop(cmd, exited, cfg)
				r.setStopped()
				return
			case <-exited:
				running = false
				how := cmd.ProcessState.String()
				r.logger().Warn("kubelet exited", "version", ver, "how", how)
				if time.Since(started) > 10*time.Second {
					backoff = minB
				}
				r.mu.Lock()
				r.st.State, r.st.LastExit, r.st.PID = StateRestarting, how, 0
				r.mu.Unlock()
				_ = os.Remove(r.PIDFile)
				if !r.pause(ctx, backoff) {
					r.setStopped()
					return
				}
				backoff = min(2*backoff, maxB)
			case <-r.restartCh():
				if r.version() == ver {
					continue
				}
				r.logger().Info("kubelet: switching", "from", ver, "to", r.version())
				r.stop(cmd, exited, cfg)
				r.mu.Lock()
				r.st.LastExit = "stopped to switch to " + r.desired
				r.mu.Unlock()
				running = false
				backoff = minB
			}
		}
	}
}

func (r *Runner) version() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.desired
}

func (r *Runner) setStopped() {
	r.mu.Lock()
	r.st.State, r.st.PID = StateStopped, 0
	r.mu.Unlock()
	_ = os.Remove(r.PIDFile)
}

// pause waits d, or less when a switch arrives; false when ctx ended.
func (r *Runner) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-r.restartCh():
		return true
	case <-t.C:
		return true
	}
}

func (r *Runner) start(cfg Config, ver string) (*exec.Cmd, chan struct{}, error) {
	r.mu.Lock()
	r.attempts++
	r.st.Version, r.st.Binary = ver, cfg.Binary(ver)
	r.mu.Unlock()
	if err := cfg.HasBinary(ver); err != nil {
		return nil, nil, err
	}
	logFile := cfg.Log
	if logFile == "" {
		logFile = r.DefaultLog
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close() // the child has its own copy
	argv := append(append(append([]string{}, cfg.Prefix...), cfg.Binary(ver)), cfg.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	_ = os.MkdirAll(filepath.Dir(r.PIDFile), 0o700)
	if err := atomicfile.WriteFile(r.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		r.logger().Warn("kubelet: pid file", "err", err)
	}
	r.mu.Lock()
	r.st.State, r.st.PID, r.st.StartedAt, r.st.LastError = StateRunning, cmd.Process.Pid, time.Now().UTC(), ""
	r.st.Starts++
	r.mu.Unlock()
	r.logger().Info("kubelet started", "version", ver, "pid", cmd.Process.Pid, "binary", cfg.Binary(ver))
	return cmd, exited, nil
}

// stop stops a kubelet: SIGTERM, then SIGKILL after the config's timeout.
func (r *Runner) stop(cmd *exec.Cmd, exited chan struct{}, cfg Config) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(cfg.stopTimeout()):
		r.logger().Warn("kubelet: no exit after SIGTERM: SIGKILL", "pid", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-exited
	}
	_ = os.Remove(r.PIDFile)
}

// stopStale stops the kubelet a killed agent left (its PID file names a
// live process whose command line names kubelet).
func (r *Runner) stopStale(cfg Config) {
	b, err := os.ReadFile(r.PIDFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "kubelet") {
		return
	}
	r.logger().Warn("kubelet: stopping the one a previous agent left", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(cfg.stopTimeout())
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			r.logger().Error("kubelet: the previous agent's kubelet does not go away", "pid", pid)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = os.Remove(r.PIDFile)
}

// Kubelet is what runs (Runtime).
func (r *Runner) Kubelet(context.Context) (Status, error) {
	r.mu.Lock()
	st, cfg := r.st, r.cfg
	r.mu.Unlock()
	if st.State == "" {
		st = Status{State: StateWaiting, Config: r.ConfigPath}
	}
	st.Available = []string{}
	if cfg != nil {
		st.Available = cfg.Available()
	}
	return st, nil
}

// SwitchKubelet records version, has Run stop the running kubelet and
// start version's, and returns once it runs (Runtime). A version whose
// binary is missing is refused with nothing changed.
func (r *Runner) SwitchKubelet(ctx context.Context, version string) (Status, error) {
	if err := CheckVersion(version); err != nil {
		return Status{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	r.mu.Lock()
	cfg := r.cfg
	if cfg == nil {
		r.mu.Unlock()
		return Status{}, fmt.Errorf("%w (%s)", ErrNotReady, r.ConfigPath)
	}
	if err := cfg.HasBinary(version); err != nil {
		r.mu.Unlock()
		return Status{}, err
	}
	if r.desired == version && r.st.Version == version && r.st.State == StateRunning {
		r.mu.Unlock()
		return r.Kubelet(ctx)
	}
	b, _ := json.Marshal(stateFile{Version: version})
	err := os.MkdirAll(filepath.Dir(r.StateFile), 0o700)
	if err == nil {
		err = atomicfile.WriteFile(r.StateFile, b, 0o600)
	}
	if err != nil {
		r.mu.Unlock()
		return Status{}, fmt.Errorf("record the kubelet version to run: %w", err)
	}
	r.desired = version
	tried := r.attempts
	r.mu.Unlock()
	select {
	case r.restartCh() <- struct{}{}:
	default:
	}
	for {
		r.mu.Lock()
		st, attempts := r.st, r.attempts
		r.mu.Unlock()
		if attempts > tried && st.Version == version {
			switch st.State {
			case StateRunning:
				return r.Kubelet(ctx)
			case StateFailed:
				return st, fmt.Errorf("%w: %s", ErrStart, st.LastError)
			}
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("kubelet %s: not started yet: %w", version, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var _ Runtime = (*Runner)(nil)
