package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServe: SIGCHLD reaps and keeps waiting; SIGTERM and SIGINT end it
// with 0.
func TestServe(t *testing.T) {
	for _, stop := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		sigs := make(chan os.Signal, 3)
		reaped := 0
		sigs <- syscall.SIGCHLD
		sigs <- syscall.SIGCHLD
		sigs <- stop
		if code := serve(sigs, func() { reaped++ }); code != 0 || reaped != 2 {
			t.Errorf("%v: exit %d after %d reaps, want 0 after 2", stop, code, reaped)
		}
	}
}

// TestReap: the exited children are collected, several at once, and reap
// returns when none is left.
func TestReap(t *testing.T) {
	var pids []int
	for range 3 {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	// Poll until all three are zombies, then reap once.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
			if err == nil && zombie(string(b)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("child %d did not exit: %s %v", pid, b, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	reap()
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", itoa(pid))); err == nil {
			t.Errorf("child %d is still there after reap", pid)
		}
	}
}

// TestBinary: the built program blocks, and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait until it catches SIGTERM (SigCgt in /proc/PID/status), so the
	// signal tests its handler and not the default action.
	deadline := time.Now().Add(20 * time.Second)
	for !catches(t, cmd.Process.Pid, syscall.SIGTERM) {
		select {
		case err := <-done:
			t.Fatalf("pause exited by itself: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("pause never installed its SIGTERM handler")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("pause exited by itself: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("pause on SIGTERM: %v, want exit 0", err)
	}
}

// catches says whether process pid has a handler for sig.
func catches(t *testing.T, pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatalf("SigCgt %q: %v", hex, err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

func zombie(stat string) bool {
	// pid (comm) S ...: the state follows the last ')'.
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

func itoa(n int) string {
	return fmt.Sprint(n)
}
