package certs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/daemon"
	"github.com/etcd-steward/steward/pkg/status"
)

// RenewerPIDFile is the pid file, under DIR/run, of the certificate
// renewal process `steward up` starts on the coordinator of a multi-host
// cluster that runs no local agent (`steward down` stops it).
const RenewerPIDFile = "certrenew.pid"

// RenewerPID returns the pid of this directory's running renewal process,
// or 0 when none runs.
func RenewerPID(c *cluster.Cluster) int {
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
// renews this directory's leaves and the joined hosts' (RenewHosts)
// at their renewal point, as an agent's loop does on a single host.
func EnsureRenewer(ctx context.Context, c *cluster.Cluster, exe string) (started bool, err error) {
	if !status.NeedsRenewer(c) {
		return false, nil
	}
	// Two `steward up` at once would both find none running and start two,
	// and `down` would stop only the one the pid file names.
	lock, err := waitForLock(ctx, filepath.Join(c.Dir, "run", "certrenew-start.lock"), 30*time.Second)
	if err != nil {
		return false, fmt.Errorf("start certificate renewal: %w", err)
	}
	defer lock.Release()
	if RenewerPID(c) != 0 {
		return false, nil
	}
	// One that died (not stopped by `down`): say so, it explains a gap
	// in the renewals.
	if rs, err := status.Renewal(c, time.Now()); err == nil && rs.PID != 0 && rs.StoppedAt.IsZero() && !proc.Alive(rs.PID) {
		c.Progress.Say("the certificate renewal process (pid %d) is gone (last heartbeat %s): starting it again", rs.PID, rs.Heartbeat.Local().Format(time.RFC3339))
	}
	logPath := filepath.Join(c.Dir, "logs", "certrenew.log")
	// It refuses bad input at once (an unreadable spec, ...): Start gives
	// it a moment to do so, and reports it instead of a process that is
	// gone.
	pid, err := daemon.Start(ctx, daemon.Daemon{
		Name: "certificate renewal",
		Exe:  exe,
		Args: []string{"certs", "renew", "--watch", "--dir", c.Dir},
		// No secrets: it needs only the directory (the CA key is read there).
		Env:     childenv.Agent(),
		Dir:     c.Dir,
		Log:     logPath,
		PIDFile: filepath.Join(c.Dir, "run", RenewerPIDFile),
		Settle:  500 * time.Millisecond,
	})
	if err != nil {
		return pid != 0, err
	}
	c.Progress.Say("started certificate renewal of the hosts (pid %d, log %s)", pid, logPath)
	return true, nil
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
func HoldRenewer(c *cluster.Cluster) (release func(), err error) {
	run := filepath.Join(c.Dir, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, fmt.Errorf("certificate renewal: %w", err)
	}
	lock, err := filelock.TryLock(filepath.Join(run, "certrenew.lock"))
	if errors.Is(err, filelock.ErrHeld) {
		if pid := RenewerPID(c); pid != 0 {
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
