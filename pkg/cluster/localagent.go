package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/spec"
)

// EnsureLocalAgent starts the agent of this machine (spec.LocalAgent) in
// the background when the spec has one and it does not answer, as `steward
// up` does, and reports whether it started it. exe runs the agent (default:
// this executable). The agent starts the members it last ran; commands
// that work on member processes (recover, member, upgrade) call it so they
// work after `steward down` or a reboot.
func (c *Cluster) EnsureLocalAgent(ctx context.Context, exe string) (started bool, err error) {
	if _, ok := c.Spec.Agent(spec.LocalAgent); !ok {
		return false, nil
	}
	ac, err := c.Agent(spec.LocalAgent)
	if err != nil {
		return false, err
	}
	if ac.Ping(ctx, time.Second) == nil {
		return false, nil
	}
	if err := c.startLocalAgent(ctx, ac, exe); err != nil {
		return false, err
	}
	return true, nil
}

func (c *Cluster) startLocalAgent(ctx context.Context, ac *agentapi.Client, exe string) error {
	say := c.Progress
	var err error
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.Dir, "logs", "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "agent", "--dir", c.Dir, "--name", spec.LocalAgent)
	// The agent gets a short list of variables, not this process's whole
	// environment; the S3 credentials only when the spec names no
	// credentials file (the agent's backup loop then reads them there).
	var pass []string
	if s3 := c.Spec.Backup.S3; s3 != nil && s3.CredentialsFile == "" {
		pass = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	}
	cmd.Env = childenv.Agent(pass...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = c.Dir
	// A session of its own: the agent outlives the `steward up` that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.MkdirAll(filepath.Join(c.Dir, "run"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "run", "agent.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		say.Say("warning: write agent pid file: %v", err)
	}
	say.Say("started agent (pid %d, log %s)", pid, filepath.Join(c.Dir, "logs", "agent.log"))
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("agent exited at start (%v): %s", err, proc.LogTail(filepath.Join(c.Dir, "logs", "agent.log"), 3))
		default:
		}
		if ac.Ping(ctx, 500*time.Millisecond) == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("agent did not answer on %s within 15s; see %s", ac.Address(), filepath.Join(c.Dir, "logs", "agent.log"))
}
