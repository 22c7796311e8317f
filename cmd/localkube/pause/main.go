// Command pause is the pause image's program (`localkube images`): the
// first process of every pod sandbox, which holds the pod's namespaces open.
// It blocks until SIGTERM or SIGINT, then exits 0; meanwhile it reaps every
// child that exits (SIGCHLD), as the PID 1 of a pod that shares its process
// namespace must, so that no zombie is left behind. Built static
// (CGO_ENABLED=0) and alone in its image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "pause: takes no arguments; it blocks until SIGTERM or SIGINT")
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	os.Exit(serve(sigs, reap))
}

// serve waits for signals: it reaps children on SIGCHLD and returns the
// exit code 0 on any other (SIGTERM, SIGINT).
func serve(sigs <-chan os.Signal, reap func()) int {
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		return 0
	}
	return 0
}

// reap collects every child that has exited, without blocking: one SIGCHLD
// may stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
