// Package daemon starts Steward's background processes: this machine's
// agent (bootstrap.EnsureLocalAgent) and the coordinator's certificate
// renewal (certs.EnsureRenewer). Start is the one way to do it:
//
//   - the process runs this executable (unless Exe says otherwise) in a
//     session of its own, so it outlives the command that started it;
//   - its output is appended to its log file (0600, in a 0700 directory);
//   - its pid is written atomically to its pid file (0600) once it runs:
//     when that fails it is killed, so no process runs that `steward down`
//     cannot find;
//   - Start then waits until it answers (Ready), or for Settle when it has
//     no way to answer: a process that exits meanwhile is reported with
//     the last lines of its log (proc.LogTail), and its pid file removed;
//     one that never answers is reported with where it was asked and its
//     log; the caller's context ending stops the wait (the process keeps
//     running).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/proc"
)

// Daemon is a background process to start.
type Daemon struct {
	// Name is what it is, in errors ("agent", "certificate renewal").
	Name string
	// Exe runs it ("": this executable), with Args.
	Exe  string
	Args []string
	// Env is its whole environment (internal/childenv), Dir its working
	// directory.
	Env []string
	Dir string
	// Log is the file its output is appended to; PIDFile where its pid is
	// written ("": nowhere).
	Log     string
	PIDFile string
	// Ready reports whether it answers; Start asks it every 100ms until
	// Timeout. Address is where Ready asks, for the error when it never
	// answers.
	Ready   func(ctx context.Context) bool
	Timeout time.Duration
	Address string
	// Settle is how long Start watches a daemon that has no Ready for an
	// exit at start (it refuses bad input at once).
	Settle time.Duration
	// Started, when set, is called with the pid once the process runs
	// (and its pid file is written), before Start waits for it: a
	// progress line then comes before the wait, not after it.
	Started func(pid int)
}

// Start starts d and waits as the package doc says. It returns the pid
// of the running process; with an error, 0 unless the process still runs
// (the caller's context ended before it answered).
func Start(ctx context.Context, d Daemon) (pid int, err error) {
	if d.Log == "" {
		return 0, ErrNoLog
	}
	exe := d.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return 0, err
		}
	}
	for _, f := range []string{d.Log, d.PIDFile} {
		if f == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return 0, err
		}
	}
	logf, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, d.Args...)
	cmd.Env = d.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = d.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", d.Name, err)
	}
	pid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if d.PIDFile != "" {
		if err := atomicfile.WriteFile(d.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
			_ = cmd.Process.Kill()
			return 0, fmt.Errorf("write the %s's pid file: %w", d.Name, err)
		}
	}
	if d.Started != nil {
		d.Started(pid)
	}
	exitedErr := func(err error) error {
		if d.PIDFile != "" {
			_ = os.Remove(d.PIDFile)
		}
		return fmt.Errorf("%s exited at start (%v): %s", d.Name, err, proc.LogTail(d.Log, 3))
	}
	if d.Ready == nil {
		t := time.NewTimer(d.Settle)
		defer t.Stop()
		select {
		case err := <-exited:
			return 0, exitedErr(err)
		case <-ctx.Done():
			return pid, ctx.Err()
		case <-t.C:
			return pid, nil
		}
	}
	deadline := time.Now().Add(d.Timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return 0, exitedErr(err)
		default:
		}
		if d.Ready(ctx) {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return pid, fmt.Errorf("%s did not answer on %s within %s; see %s", d.Name, d.Address, d.Timeout, d.Log)
		}
		select {
		case err := <-exited:
			return 0, exitedErr(err)
		case <-ctx.Done():
			return pid, ctx.Err()
		case <-tick.C:
		}
	}
}

// ErrNoLog is returned by Start when d names no log file.
var ErrNoLog = errors.New("a daemon needs a log file")
