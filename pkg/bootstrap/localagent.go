package bootstrap

import (
	"context"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/daemon"
	"github.com/etcd-steward/steward/pkg/spec"
)

// agentStartTimeout bounds the wait for a started agent's first answer.
const agentStartTimeout = 15 * time.Second

// EnsureLocalAgent starts the agent of this machine (spec.LocalAgent) in
// the background when the spec has one and it does not answer, as `steward
// up` does, and reports whether it started it. exe runs the agent (default:
// this executable). The agent starts the members it last ran; commands
// that work on member processes (recover, member, upgrade) call it so they
// work after `steward down` or a reboot. The process is started by
// pkg/daemon: log DIR/logs/agent.log, pid DIR/run/agent.pid, and a wait
// of up to 15 s for its first answer on its socket.
func EnsureLocalAgent(ctx context.Context, c *cluster.Cluster, exe string) (started bool, err error) {
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
	// The agent gets a short list of variables, not this process's whole
	// environment; the S3 credentials only when the spec names no
	// credentials file (the agent's backup loop then reads them there).
	var pass []string
	if s3 := c.Spec.Backup.S3; s3 != nil && s3.CredentialsFile == "" {
		pass = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	}
	log := filepath.Join(c.Dir, "logs", "agent.log")
	_, err = daemon.Start(ctx, daemon.Daemon{
		Name:    "agent",
		Exe:     exe,
		Args:    []string{"agent", "--dir", c.Dir, "--name", spec.LocalAgent},
		Env:     childenv.Agent(pass...),
		Dir:     c.Dir,
		Log:     log,
		PIDFile: filepath.Join(c.Dir, "run", "agent.pid"),
		Ready:   func(ctx context.Context) bool { return ac.Ping(ctx, 500*time.Millisecond) == nil },
		Timeout: agentStartTimeout,
		Address: ac.Address(),
		// Said before the wait for its first answer (up to 15 s), so the
		// command does not sit silent meanwhile.
		Started: func(pid int) { c.Progress.Say("started agent (pid %d, log %s); waiting for it to answer", pid, log) },
	})
	if err != nil {
		return false, err
	}
	return true, nil
}
