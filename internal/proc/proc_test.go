package proc

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestAliveCmdlineFind(t *testing.T) {
	// sh waits in its builtin read, on a pipe this test keeps open: no
	// child process (a forked child would show sh's command line, marker
	// included, until it exec'd, and Find would see two).
	cmd := exec.Command("sh", "-c", "read x", "steward-proc-test-marker")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Until the child has exec'd, /proc shows the parent's command line.
	deadline := time.Now().Add(10 * time.Second)
	for !HasArg(pid, "steward-proc-test-marker") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !Alive(pid) || !HasArg(pid, "steward-proc-test-marker") || HasArg(pid, "steward-proc") {
		t.Fatalf("running child: alive %v cmdline %q", Alive(pid), Cmdline(pid))
	}
	found := Find(func(a []string) bool { return slices.Contains(a, "steward-proc-test-marker") })
	if !slices.Equal(found, []int{pid}) {
		t.Errorf("Find = %v, want [%d]", found, pid)
	}
	if Find(func([]string) bool { return true }) == nil {
		t.Error("Find of everything found nothing")
	}
	if slices.Contains(Find(func([]string) bool { return true }), os.Getpid()) {
		t.Error("Find returned the calling process")
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	// Killed but not yet reaped: a zombie, which counts as dead.
	for Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if HasArg(pid, "steward-proc-test-marker") {
		t.Error("HasArg true for a dead process")
	}
	_ = cmd.Wait()
	if Alive(pid) || Cmdline(pid) != nil {
		t.Error("reaped process still alive or with a command line")
	}
	if Alive(0) || Alive(-1) {
		t.Error("pid 0 or -1 alive")
	}
}
