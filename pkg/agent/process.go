package agent

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
)

// process is a running member: either a child the agent started, or one an
// earlier agent started and this one adopted after a restart.
//
// pid and done never change. exit is written only by the goroutine that
// waits for the process, before it closes done; read it only after done
// is closed (closing the channel orders the write before those reads).
type process struct {
	pid  int
	done chan struct{} // closed when the process has exited
	exit string        // how it exited; valid after done is closed
}

// startProcess starts a child and reaps it in the background.
func startProcess(cmd *exec.Cmd) (*process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.exit = "exited with code 0"
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.exit = "killed by signal " + ws.Signal().String()
			} else {
				p.exit = fmt.Sprintf("exited with code %d", ee.ExitCode())
			}
		default:
			p.exit = err.Error()
		}
		close(p.done)
	}()
	return p, nil
}

// adoptProcess watches a process the agent did not start. It is not our
// child, so its exit status is unknown; liveness is polled.
func adoptProcess(pid int) *process {
	p := &process{pid: pid, done: make(chan struct{})}
	go func() {
		for proc.Alive(pid) {
			time.Sleep(200 * time.Millisecond)
		}
		p.exit = "exited (adopted process; exit status unknown)"
		close(p.done)
	}()
	return p
}

func (p *process) signal(sig syscall.Signal) {
	_ = syscall.Kill(p.pid, sig)
}

// terminate sends SIGTERM, waits up to grace, then sends SIGKILL and waits.
func (p *process) terminate(grace time.Duration) {
	if grace <= 0 {
		p.signal(syscall.SIGKILL)
		<-p.done
		return
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}
