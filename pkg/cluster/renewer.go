package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// RenewerPIDFile is the pid file, under DIR/run, of the certificate
// renewal process `steward up` starts on the coordinator of a multi-host
// cluster that runs no local agent (`steward down` stops it).
const RenewerPIDFile = "certrenew.pid"

// NeedsRenewer reports whether this machine needs a renewal process of its
// own: it is the coordinator of a multi-host cluster (its certificate
// directory holds the CA key, the spec places agents on other hosts, TLS
// is on) and no agent runs here (no member on agent "local"), so no
// agent's renewal loop would sign the hosts' leaves. Only the coordinator
// can sign them: the CA key never leaves it.
func (c *Cluster) NeedsRenewer() bool {
	if c.Spec.TLS.Disabled || !c.Spec.MultiHost() || c.Spec.Uses(spec.LocalAgent) {
		return false
	}
	_, err := os.Stat(filepath.Join(c.CertDir(), pki.CAKey))
	return err == nil
}

// RenewerPID returns the pid of this directory's running renewal process,
// or 0 when none runs.
func (c *Cluster) RenewerPID() int {
	b, err := os.ReadFile(filepath.Join(c.Dir, "run", RenewerPIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !proc.Alive(pid) {
		return 0
	}
	// A recycled pid is not ours: the command line names this directory.
	if !strings.Contains(strings.Join(proc.Cmdline(pid), " "), c.Dir) {
		return 0
	}
	return pid
}

// EnsureRenewer starts, when NeedsRenewer and none runs yet, the
// certificate renewal of this machine in the background (`steward certs
// renew --watch`, in a session of its own, logging to
// DIR/logs/certrenew.log, its pid in DIR/run/certrenew.pid), and reports
// whether it started it. exe runs it (default: this executable). It
// renews this directory's leaves and the joined hosts' (cluster.RenewHosts)
// at their renewal point, as an agent's loop does on a single host.
func (c *Cluster) EnsureRenewer(ctx context.Context, exe string) (started bool, err error) {
	if !c.NeedsRenewer() {
		return false, nil
	}
	// Two `steward up` at once would both find none running and start two,
	// and `down` would stop only the one the pid file names.
	lock, err := waitForLock(ctx, filepath.Join(c.Dir, "run", "certrenew-start.lock"), 30*time.Second)
	if err != nil {
		return false, fmt.Errorf("start certificate renewal: %w", err)
	}
	defer lock.Release()
	if c.RenewerPID() != 0 {
		return false, nil
	}
	// One that died (not stopped by `down`): say so, it explains a gap
	// in the renewals.
	if rs, err := c.Renewal(time.Now()); err == nil && rs.PID != 0 && rs.StoppedAt.IsZero() && !proc.Alive(rs.PID) {
		c.Progress.Say("the certificate renewal process (pid %d) is gone (last heartbeat %s): starting it again", rs.PID, rs.Heartbeat.Local().Format(time.RFC3339))
	}
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return false, err
		}
	}
	for _, d := range []string{"logs", "run"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return false, err
		}
	}
	logPath := filepath.Join(c.Dir, "logs", "certrenew.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "certs", "renew", "--watch", "--dir", c.Dir)
	// No secrets: it needs only the directory (the CA key is read there).
	cmd.Env = childenv.Agent()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = c.Dir
	// A session of its own: it outlives the `steward up` that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start certificate renewal: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := atomicfile.WriteFile(filepath.Join(c.Dir, "run", RenewerPIDFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return false, fmt.Errorf("write the certificate renewal's pid file: %w", err)
	}
	// It refuses bad input at once (an unreadable spec, ...): give it a
	// moment to do so, and report it instead of a process that is gone.
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	select {
	case err := <-exited:
		_ = os.Remove(filepath.Join(c.Dir, "run", RenewerPIDFile))
		return false, fmt.Errorf("certificate renewal exited at start (%v): %s", err, lastLines(logPath, 3))
	case <-ctx.Done():
		return true, ctx.Err()
	case <-t.C:
	}
	c.Progress.Say("started certificate renewal of the hosts (pid %d, log %s)", pid, logPath)
	return true, nil
}

// RenewalStateFile is the file, under DIR/status, in which the certificate
// renewal loop of a directory (an agent's, or `steward certs renew
// --watch`) records that it is alive and what it did (RenewalState).
const RenewalStateFile = "certrenew.json"

// RenewalStatePath is the renewal loop's state file of the Steward
// directory dir.
func RenewalStatePath(dir string) string {
	return filepath.Join(dir, "status", RenewalStateFile)
}

// RenewalState is what the certificate renewal loop of a directory records
// (RenewalStatePath, written atomically at every heartbeat and round). Its
// JSON field names are stable: `steward status -o json` shows them under
// certificateRenewal (docs/cli.md).
type RenewalState struct {
	// PID is the process running the loop: the agent, or `steward certs
	// renew --watch`.
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
	// Heartbeat is when the loop last said it is alive (every
	// RenewalHeartbeat, also in the middle of a long round).
	Heartbeat time.Time `json:"heartbeat"`
	// LastRound is when the loop last finished a round (renewed what was
	// due, or found nothing due).
	LastRound time.Time `json:"lastRound,omitzero"`
	// LastRenewal is when the loop last renewed a certificate, and
	// LastRenewed which ones (HOST/NAME for a joined host's).
	LastRenewal time.Time `json:"lastRenewal,omitzero"`
	LastRenewed []string  `json:"lastRenewed,omitempty"`
	// NextRenewal is the earliest renewal point of this directory's
	// leaves (a joined host's are read at each round from its agent and
	// not included).
	NextRenewal time.Time `json:"nextRenewal,omitzero"`
	// LastError is the last round's problem; empty when it went well.
	LastError string `json:"lastError,omitempty"`
	// StoppedAt is set when the loop stopped by request (SIGTERM, `steward
	// down`, the agent stopping).
	StoppedAt time.Time `json:"stoppedAt,omitzero"`
}

// RenewalHeartbeat is how often a renewal loop records its heartbeat;
// RenewalStale how old a heartbeat may be before status reports the loop
// as not responding.
const (
	RenewalHeartbeat = 5 * time.Second
	RenewalStale     = 30 * time.Second
)

// WriteRenewalState records st in the state file of dir, atomically (0600).
func WriteRenewalState(dir string, st RenewalState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
		return fmt.Errorf("record the certificate renewal's state: %w", err)
	}
	if err := atomicfile.WriteFile(RenewalStatePath(dir), b, 0o600); err != nil {
		return fmt.Errorf("record the certificate renewal's state: %w", err)
	}
	return nil
}

// RenewalStatus is the certificate renewal of this directory as `steward
// status` sees it: the loop's recorded state and whether it runs.
type RenewalStatus struct {
	// Running is true when the recorded process is alive, did not stop,
	// and its heartbeat is fresher than RenewalStale.
	Running bool `json:"running"`
	// Process says who must run the loop here: "agent" (this machine's
	// agent runs members and the loop beside them) or "certs renew
	// --watch" (the coordinator of a multi-host cluster without a local
	// agent: a process of its own, started by `steward up` or systemd).
	Process string `json:"process"`
	// Log is the renewal process's log file (only for "certs renew --watch").
	Log string `json:"log,omitempty"`
	RenewalState
}

// CondCertificateRenewal is True while this directory's certificate
// renewal loop runs (its heartbeat is fresh), False when it is gone, has
// stopped or does not respond, Unknown when it never reported.
const CondCertificateRenewal = "CertificateRenewal"

// Renewal reads this directory's certificate renewal state, with who
// must run the loop here (Process, Log); PID is 0 when no loop ever
// recorded one. Running is computed at now.
func (c *Cluster) Renewal(now time.Time) (*RenewalStatus, error) {
	rs := &RenewalStatus{Process: "agent"}
	if c.NeedsRenewer() {
		rs.Process = "certs renew --watch"
		rs.Log = filepath.Join(c.Dir, "logs", "certrenew.log")
	}
	b, err := os.ReadFile(RenewalStatePath(c.Dir))
	if errors.Is(err, fs.ErrNotExist) {
		return rs, nil
	}
	if err != nil {
		return rs, fmt.Errorf("read the certificate renewal's state: %w", err)
	}
	if err := json.Unmarshal(b, &rs.RenewalState); err != nil {
		return rs, fmt.Errorf("read the certificate renewal's state %s: %w", RenewalStatePath(c.Dir), err)
	}
	rs.Running = rs.StoppedAt.IsZero() && proc.Alive(rs.PID) && now.Sub(rs.Heartbeat) <= RenewalStale
	return rs, nil
}

// renewalCondition computes CondCertificateRenewal from what Renewal
// read (rs) and its error, at now. alive says whether rs.PID runs.
func renewalCondition(rs *RenewalStatus, err error, alive bool, now time.Time) Condition {
	cond := Condition{Type: CondCertificateRenewal}
	restart := "`steward up` restarts it (or its systemd unit, deploy/systemd/steward-certrenew.service, does)"
	if rs.Process == "agent" {
		restart = "it runs in this machine's agent: start the agent (`steward up`, or its systemd unit)"
	}
	ago := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() + " ago" }
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = "Unknown", "StateUnreadable", err.Error()
	case rs.PID == 0 && rs.Process == "agent":
		cond.Status, cond.Reason = "Unknown", "NotReported"
		cond.Message = "the agent's certificate renewal loop has not reported yet"
	case rs.PID == 0:
		cond.Status, cond.Reason = "False", "NotRunning"
		cond.Message = "no certificate renewal runs for this directory: the hosts' certificates are not renewed; " + restart
	case !rs.StoppedAt.IsZero():
		cond.Status, cond.Reason = "False", "Stopped"
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) stopped %s; %s", rs.PID, ago(rs.StoppedAt), restart)
	case !alive:
		cond.Status, cond.Reason = "False", "NotRunning"
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) is gone, last heartbeat %s: certificates are not renewed; %s", rs.PID, ago(rs.Heartbeat), restart)
	case now.Sub(rs.Heartbeat) > RenewalStale:
		cond.Status, cond.Reason = "False", "NotResponding"
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) last reported %s (every %s expected)", rs.PID, ago(rs.Heartbeat), RenewalHeartbeat)
	default:
		cond.Status, cond.Reason = "True", "Running"
		cond.Message = fmt.Sprintf("pid %d, heartbeat %s", rs.PID, ago(rs.Heartbeat))
		if !rs.LastRenewal.IsZero() {
			cond.Message += fmt.Sprintf(", last renewal %s", ago(rs.LastRenewal))
		}
		if !rs.NextRenewal.IsZero() {
			cond.Message += fmt.Sprintf(", next renewal point %s", rs.NextRenewal.UTC().Format(time.RFC3339))
		}
		if rs.LastError != "" {
			cond.Message += "; last round failed: " + rs.LastError
		}
	}
	return cond
}

// renewalStatus reads the renewal state and computes its condition.
func (c *Cluster) renewalStatus(now time.Time) (*RenewalStatus, Condition) {
	rs, err := c.Renewal(now)
	return rs, renewalCondition(rs, err, rs.PID != 0 && proc.Alive(rs.PID), now)
}

// ErrRenewerRunning is returned by HoldRenewer when another renewal process
// of the directory holds it.
var ErrRenewerRunning = errors.New("another certificate renewal process runs for this directory")

// HoldRenewer makes the calling process this directory's one certificate
// renewal process (`steward certs renew --watch`, however it was started:
// by `steward up` or by systemd): it takes DIR/run/certrenew.lock, held
// until release, and records its pid in DIR/run/certrenew.pid, so `up`
// finds it running and `down` stops it. A second one is refused with
// ErrRenewerRunning, naming the first one's pid. release removes the pid
// file (when it still names this process) and the lock.
func (c *Cluster) HoldRenewer() (release func(), err error) {
	run := filepath.Join(c.Dir, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, fmt.Errorf("certificate renewal: %w", err)
	}
	lock, err := filelock.TryLock(filepath.Join(run, "certrenew.lock"))
	if errors.Is(err, filelock.ErrHeld) {
		if pid := c.RenewerPID(); pid != 0 {
			return nil, fmt.Errorf("%w: pid %d (%s)", ErrRenewerRunning, pid, c.Dir)
		}
		return nil, fmt.Errorf("%w (%s)", ErrRenewerRunning, c.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("certificate renewal: %w", err)
	}
	pidFile := filepath.Join(run, RenewerPIDFile)
	me := strconv.Itoa(os.Getpid()) + "\n"
	if err := atomicfile.WriteFile(pidFile, []byte(me), 0o600); err != nil {
		lock.Release()
		return nil, fmt.Errorf("write the certificate renewal's pid file: %w", err)
	}
	return func() {
		if b, err := os.ReadFile(pidFile); err == nil && string(b) == me {
			_ = os.Remove(pidFile)
		}
		lock.Release()
	}, nil
}
