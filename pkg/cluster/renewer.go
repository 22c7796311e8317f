package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/childenv"
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
