package main

import (
	"context"
	"testing"
	"time"
)

// TestIsSupervisor: down signals only the supervisor of its directory, not
// whatever process got a dead supervisor's PID.
func TestIsSupervisor(t *testing.T) {
	argv := func(a ...string) []string { return a }
	if !isSupervisor(argv("/usr/bin/localkube", "up", "--supervise", "--dir", "/tmp/lk", "--nodes", "3"), "/tmp/lk") {
		t.Error("the supervisor not recognised")
	}
	for name, c := range map[string][]string{
		"another process":   argv("/usr/sbin/sshd", "-D"),
		"another directory": argv("/usr/bin/localkube", "up", "--supervise", "--dir", "/tmp/other"),
		"not supervising":   argv("/usr/bin/localkube", "up", "--dir", "/tmp/lk"),
		"gone":              nil,
	} {
		if isSupervisor(c, "/tmp/lk") {
			t.Errorf("%s taken for the supervisor", name)
		}
	}
}

type fakeCluster struct{ down chan struct{} }

func (f fakeCluster) Down() error { close(f.down); return nil }

// TestHoldClusterSignalDuringUp: a signal that comes after the bring-up
// last looked at its context (here: while up returns) still removes the
// cluster.
func TestHoldClusterSignalDuringUp(t *testing.T) {
	sigCtx, signal := context.WithCancel(t.Context())
	f := fakeCluster{down: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- holdCluster(sigCtx, func(ctx context.Context) (downer, error) {
			signal() // the signal, once up is past its last check
			<-ctx.Done()
			return f, nil // up had made it all
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the signal was lost: the cluster is still held")
	}
	select {
	case <-f.down:
	default:
		t.Error("the cluster was not removed")
	}
}
