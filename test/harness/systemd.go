package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Systemd is a real systemd system manager (PID 1 of its own PID and mount
// namespaces) for tests of members run by systemd units: the machines
// here boot without systemd. Its namespace has its own /run, cgroup2
// hierarchy and /etc/systemd/system (so enabling a unit writes nothing on
// the host); it shares the network, the file system and the host's view
// of its processes.
type Systemd struct {
	// PID is systemd's pid as the host sees it.
	PID int
	// BinDir holds a systemctl that runs the real one against this
	// systemd (in its mount and PID namespaces: systemd refuses a client
	// whose pid it cannot see): put it first on PATH of a process that
	// should manage this systemd's units.
	BinDir string
	// UnitDir is a directory of the host in this systemd's unit search
	// path: a unit file written there is loaded from there (its
	// FragmentPath) after `systemctl daemon-reload`.
	UnitDir string
}

// systemdScript prepares the namespace (run by unshare as its pid 1's
// parent shell) and becomes systemd, booting to an empty target.
//
// systemd shares the host's file system, so it must not start the
// distribution's units: systemd-tmpfiles-setup alone would empty /tmp.
// SYSTEMD_UNIT_PATH restricts it to two private directories, where the
// targets every service depends on by default (sysinit, basic, ...) are
// empty, and the test's unit directory ($UNIT_DIR); /etc/systemd/system
// (where enable writes) is a private tmpfs.
const systemdScript = `set -e
mount --make-rprivate /
mount -t proc proc /proc
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=755 tmpfs /etc/systemd/system
mount -t cgroup2 none /sys/fs/cgroup
mkdir -p /run/systemd/system
cd /run/systemd/system
for t in steward-test sysinit basic multi-user default shutdown network network-online local-fs remote-fs sockets timers paths slices; do
  printf '[Unit]\nDescription=%s (empty: steward test)\nDefaultDependencies=no\n' $t > $t.target
done
printf '[Unit]\nDescription=system slice\nDefaultDependencies=no\n' > system.slice
SYSTEMD_UNIT_PATH=/etc/systemd/system:/run/systemd/system:"$UNIT_DIR" exec /lib/systemd/systemd --system --unit=steward-test.target --log-target=kmsg --log-level=warning
`

// StartSystemd starts systemd in new PID and mount namespaces and waits
// until it runs. Cleanup kills it (the kernel kills every process of its
// PID namespace with it, so units it ran end too) and removes the control
// groups it made.
func StartSystemd(t testing.TB) *Systemd {
	t.Helper()
	const bin = "/lib/systemd/systemd"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("this test runs a real systemd, and %s is missing: install the systemd package (apt-get install systemd)", bin)
	}
	before, err := cgroup2Dirs()
	if err != nil {
		t.Fatalf("list the cgroup2 hierarchy: %v", err)
	}
	s := &Systemd{BinDir: t.TempDir(), UnitDir: t.TempDir()}
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount", "--", "sh", "-c", systemdScript)
	cmd.Env = append(os.Environ(), "UNIT_DIR="+s.UnitDir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start systemd: %v", err)
	}
	t.Cleanup(func() { s.stop(t, cmd, before) })
	err = Poll(10*time.Second, 50*time.Millisecond, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return fmt.Errorf("unshare has no child yet")
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return err
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); !strings.HasSuffix(exe, "/systemd") {
			return fmt.Errorf("pid %d runs %s, not systemd yet", pid, exe)
		}
		s.PID = pid
		return nil
	})
	if err != nil {
		t.Fatalf("systemd did not start: %v; output: %s", err, out.String())
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec nsenter --target %d --mount --pid -- /usr/bin/systemctl \"$@\"\n", s.PID)
	if err := os.WriteFile(filepath.Join(s.BinDir, "systemctl"), []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	err = Poll(30*time.Second, 100*time.Millisecond, func() error {
		o, err := s.Systemctl("is-system-running")
		if strings.TrimSpace(o) != "running" {
			return fmt.Errorf("is-system-running: %q, %v", strings.TrimSpace(o), err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("systemd does not reach running: %v; output: %s", err, out.String())
	}
	return s
}

// PathEnv is PATH with BinDir first, as KEY=VALUE.
func (s *Systemd) PathEnv() string {
	return "PATH=" + s.BinDir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// Systemctl runs systemctl against this systemd and returns its output.
func (s *Systemd) Systemctl(args ...string) (string, error) {
	out, err := exec.Command(filepath.Join(s.BinDir, "systemctl"), args...).CombinedOutput()
	return string(out), err
}

// MustSystemctl is Systemctl failing the test on error.
func (s *Systemd) MustSystemctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.Systemctl(args...)
	if err != nil {
		t.Fatalf("systemctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// inCgroup2 runs the shell command cmd (with args as $1...) in the root of
// the cgroup2 hierarchy, which the host does not mount (every controller
// is on cgroup v1): mounted for the call in a mount namespace of its own.
func inCgroup2(cmd string, args ...string) ([]byte, error) {
	script := `set -e
d=$(mktemp -d)
mount -t cgroup2 none "$d"
status=0
(cd "$d" && ` + cmd + `) || status=$?
umount "$d"
rmdir "$d"
exit $status
`
	return exec.Command("unshare", append([]string{"--mount", "--", "sh", "-c", script, "sh"}, args...)...).Output()
}

// cgroup2Dirs lists the control groups of the cgroup2 hierarchy, relative
// to its root, deepest first.
func cgroup2Dirs() ([]string, error) {
	out, err := inCgroup2("find . -mindepth 1 -depth -type d")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// systemdGroups are the control groups of now that systemd made: new since
// before, under a top-level group of a systemd unit (a .slice or .scope:
// init.scope, system.slice, ...). Other new groups are other processes'
// running beside the test (a local Kubernetes node's lkPID...-node-x and
// its pods' groups, made while this systemd ran): never removed here.
func systemdGroups(before, now []string) []string {
	var left []string
	for _, d := range now {
		top, _, _ := strings.Cut(strings.TrimPrefix(d, "./"), "/")
		if !slices.Contains(before, d) && (strings.HasSuffix(top, ".slice") || strings.HasSuffix(top, ".scope")) {
			left = append(left, d)
		}
	}
	return left
}

// stop kills systemd and with it its namespace, then removes the control
// groups it created in the cgroup2 hierarchy (those not there before it
// started: the kernel keeps them after their processes are gone).
func (s *Systemd) stop(t testing.TB, cmd *exec.Cmd, before []string) {
	if s.PID != 0 {
		_ = syscall.Kill(s.PID, syscall.SIGKILL)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	var left []string
	err := Poll(10*time.Second, 100*time.Millisecond, func() error {
		now, err := cgroup2Dirs()
		if err != nil {
			return err
		}
		left = systemdGroups(before, now)
		if len(left) == 0 {
			return nil
		}
		// Deepest first; a group whose processes are still exiting
		// refuses (EBUSY) until the next round.
		_, _ = inCgroup2(`rmdir "$@" 2>/dev/null || true`, left...)
		return fmt.Errorf("control groups left: %v", left)
	})
	if err != nil {
		t.Errorf("cleanup: remove the test systemd's control groups: %v", err)
	}
}
