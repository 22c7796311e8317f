package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/agentapi"
)

// StartLocalAgent starts this directory's local agent itself, as `steward
// agent --dir DIR ARGS...` (log DIR/logs/agent.log), and returns once its
// socket answers: a test that needs the agent's own flags starts it before
// `steward up`, which then uses it. The agent is shut down (its members
// stopped) and waited for when the test ends, before the Env's cleanup.
func (e *Env) StartLocalAgent(args ...string) {
	tb := e.TB
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o700); err != nil {
		tb.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(e.Dir, "logs", "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(e.Bin, append([]string{"agent", "--dir", e.Dir, "--name", "local"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	ac, err := agentapi.NewClient("unix://" + agent.SocketPath(e.Dir))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = ac.Shutdown(context.Background())
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			tb.Errorf("the agent (pid %d) did not stop within 60 s of its shutdown: killed", cmd.Process.Pid)
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	Eventually(tb, 20*time.Second, 100*time.Millisecond, "the local agent to answer", func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			tb.Fatalf("the agent exited at start (%s):\n%s", cmd.ProcessState, b)
		default:
		}
		return ac.Ping(context.Background(), time.Second)
	})
}
