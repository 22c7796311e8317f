package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/etcd-steward/steward/internal/proc"
)

// kill stops a started daemon when the test ends.
func kill(t *testing.T, pid int) {
	t.Helper()
	if pid > 0 {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
}

func sh(dir, script string) Daemon {
	return Daemon{
		Name: "test daemon", Exe: "/bin/sh", Args: []string{"-c", script}, Dir: dir,
		Log: filepath.Join(dir, "logs", "d.log"), PIDFile: filepath.Join(dir, "run", "d.pid"),
	}
}

// TestStartReady: the daemon runs in a session of its own, its pid in
// its pid file (0600), its output in its log (0600, directory 0700), and
// Start returns once Ready answers.
func TestStartReady(t *testing.T) {
	dir := t.TempDir()
	d := sh(dir, "echo hello; touch ready; exec sleep 60")
	d.Ready = func(context.Context) bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil }
	d.Timeout = 10 * time.Second
	pid, err := Start(t.Context(), d)
	kill(t, pid)
	if err != nil || pid == 0 {
		t.Fatalf("Start = %d, %v", pid, err)
	}
	if !proc.Alive(pid) {
		t.Error("daemon not running")
	}
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Errorf("session %d, want its own (%d)", sid, pid)
	}
	b, err := os.ReadFile(d.PIDFile)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Errorf("pid file %q, %v; want %d", b, err, pid)
	}
	for f, want := range map[string]os.FileMode{d.PIDFile: 0o600, d.Log: 0o600, filepath.Dir(d.Log): 0o700 | os.ModeDir, filepath.Dir(d.PIDFile): 0o700 | os.ModeDir} {
		if fi, err := os.Stat(f); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", f, fi.Mode(), err, want)
		}
	}
	// The log is appended to, and holds what it said.
	deadline := time.Now().Add(10 * time.Second)
	for b, _ := os.ReadFile(d.Log); !strings.Contains(string(b), "hello"); b, _ = os.ReadFile(d.Log) {
		if time.Now().After(deadline) {
			t.Fatalf("log %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStartExitsAtStart: a daemon that exits before it answers (or
// within Settle) is reported with the end of its log, and its pid file
// removed.
func TestStartExitsAtStart(t *testing.T) {
	for _, ready := range []bool{false, true} {
		dir := t.TempDir()
		d := sh(dir, "echo one; echo refused: bad input; exit 3")
		if ready {
			d.Ready, d.Timeout = func(context.Context) bool { return false }, 10*time.Second
		} else {
			d.Settle = 10 * time.Second
		}
		pid, err := Start(t.Context(), d)
		kill(t, pid)
		if pid != 0 || err == nil || !strings.Contains(err.Error(), "test daemon exited at start (exit status 3): one | refused: bad input") {
			t.Errorf("ready %v: Start = %d, %v", ready, pid, err)
		}
		if _, err := os.Stat(d.PIDFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ready %v: pid file left: %v", ready, err)
		}
	}
}

// TestStartSettles: a daemon without Ready that keeps running for Settle
// is started.
func TestStartSettles(t *testing.T) {
	d := sh(t.TempDir(), "exec sleep 60")
	d.Settle = 100 * time.Millisecond
	pid, err := Start(t.Context(), d)
	kill(t, pid)
	if err != nil || pid == 0 || !proc.Alive(pid) {
		t.Fatalf("Start = %d, %v", pid, err)
	}
}

// TestStartNeverAnswers: one that runs but never answers within Timeout
// is reported with where it was asked and its log; it is left running
// (the caller decides), and its pid returned.
func TestStartNeverAnswers(t *testing.T) {
	d := sh(t.TempDir(), "exec sleep 60")
	d.Ready, d.Timeout, d.Address = func(context.Context) bool { return false }, 300*time.Millisecond, "unix:///x.sock"
	pid, err := Start(t.Context(), d)
	kill(t, pid)
	want := "test daemon did not answer on unix:///x.sock within 300ms; see " + d.Log
	if pid == 0 || err == nil || err.Error() != want {
		t.Errorf("Start = %d, %v; want %q", pid, err, want)
	}
}

// TestStartContextEnded: the caller's context ending stops the wait; the
// process keeps running.
func TestStartContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	d := sh(t.TempDir(), "exec sleep 60")
	d.Ready, d.Timeout = func(context.Context) bool { cancel(); return false }, time.Minute
	start := time.Now()
	pid, err := Start(ctx, d)
	kill(t, pid)
	if pid == 0 || !errors.Is(err, context.Canceled) || time.Since(start) > 30*time.Second {
		t.Errorf("Start = %d, %v after %s", pid, err, time.Since(start))
	}
}

// TestStartPIDFileFails: a pid file that cannot be written stops the
// daemon: nothing runs that `steward down` could not find.
func TestStartPIDFileFails(t *testing.T) {
	dir := t.TempDir()
	d := sh(dir, "echo $$ > started; exec sleep 60")
	d.Settle = time.Second
	if err := os.MkdirAll(filepath.Join(dir, "run", "d.pid"), 0o700); err != nil {
		t.Fatal(err)
	}
	pid, err := Start(t.Context(), d)
	kill(t, pid)
	if pid != 0 || err == nil || !strings.Contains(err.Error(), "write the test daemon's pid file") {
		t.Fatalf("Start = %d, %v", pid, err)
	}
	// Killed: either before it wrote its pid, or it is gone since.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "started"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if n > 0 && !proc.Alive(n) {
			return
		}
		if n > 0 {
			kill(t, n)
		}
		if n == 0 && time.Since(deadline.Add(-10*time.Second)) > time.Second {
			return // killed before its script wrote its pid
		}
		if time.Now().After(deadline) {
			if n > 0 {
				t.Fatalf("daemon %d still runs after its pid file failed", n)
			}
			return // never ran its script
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStartRefusesBadInput: no log, an executable that is not there.
func TestStartRefusesBadInput(t *testing.T) {
	if _, err := Start(t.Context(), Daemon{Name: "x", Exe: "/bin/true"}); !errors.Is(err, ErrNoLog) {
		t.Errorf("no log: %v", err)
	}
	d := sh(t.TempDir(), "")
	d.Exe = filepath.Join(t.TempDir(), "missing")
	if pid, err := Start(t.Context(), d); pid != 0 || err == nil || !strings.HasPrefix(err.Error(), "start test daemon: ") {
		t.Errorf("missing executable: %d, %v", pid, err)
	}
}

// TestStartSaysStartedBeforeTheWait: Started is called with the pid
// before Start waits for the daemon's first answer (a command's "started
// agent" line comes before the wait, not after up to 15 s of silence),
// and not for a daemon that cannot be started.
func TestStartSaysStartedBeforeTheWait(t *testing.T) {
	dir := t.TempDir()
	d := sh(dir, "exec sleep 60")
	var startedWith int
	asked, startedFirst := 0, false
	d.Started = func(pid int) { startedWith = pid }
	d.Ready = func(context.Context) bool {
		if asked == 0 {
			startedFirst = startedWith != 0
		}
		asked++
		return asked > 3 // answers at the fourth ask, 300 ms later
	}
	d.Timeout = 10 * time.Second
	pid, err := Start(t.Context(), d)
	kill(t, pid)
	if err != nil || pid == 0 {
		t.Fatalf("Start = %d, %v", pid, err)
	}
	if !startedFirst || startedWith != pid {
		t.Errorf("Started called with %d before the first Ready: %v; want %d, before the wait", startedWith, startedFirst, pid)
	}
	bad := sh(dir, "")
	bad.Exe = filepath.Join(dir, "missing")
	called := false
	bad.Started = func(int) { called = true }
	if _, err := Start(t.Context(), bad); err == nil || called {
		t.Errorf("a daemon that cannot start: %v, Started called: %v", err, called)
	}
}
