package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/kubeimages"
	"github.com/etcd-steward/steward/internal/ociimage"
	"github.com/etcd-steward/steward/test/harness"
)

// TestImagesRunInContainerd: the images `localkube images` builds are
// accepted by containerd 1.6 (`ctr images import`, under the tag of the
// tarball, with the configuration digest the index records as id) and run
// under runc: kube-apiserver found on PATH reports its version, and the
// pause program keeps running until SIGTERM, on which it exits 0. The
// containerd is this test's own (root, state, sockets, runc root, FIFOs and
// cgroup under its directories) and everything it made is removed.
func TestImagesRunInContainerd(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root (containerd, runc)")
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: apt-get install -y --no-install-recommends containerd runc (hack/install-containerd.sh)", tool)
		}
	}
	ctx := t.Context()
	root := harness.RepoRoot(t)
	apiserver := harness.KubeAPIServerBinary(t)

	// The images: pause (built here) and kube-apiserver.
	work := t.TempDir()
	pause := filepath.Join(work, "pause")
	if err := kubeimages.GoBuild(ctx, root, kubeimages.PausePackage, pause); err != nil {
		t.Fatal(err)
	}
	images := map[string]ociimage.Spec{
		"pause":     kubeimages.PauseSpec(pause, "test"),
		"apiserver": kubeimages.ComponentSpec("kube-apiserver", harness.Kubernetes, apiserver),
	}
	ids := map[string]string{}
	for n, s := range images {
		r, err := ociimage.Write(ctx, s, filepath.Join(work, n+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		ids[n] = r.ID
	}

	c := startContainerd(t, work)
	for n, s := range images {
		out := c.ctr(t, "images", "import", filepath.Join(work, n+".tar"))
		if !strings.Contains(out, s.Ref()) {
			t.Fatalf("import of %s: %s", n, out)
		}
		// The manifest containerd keeps names the image's configuration by
		// the digest the index records as id.
		ls := c.ctr(t, "images", "ls")
		var manifest string
		for line := range strings.SplitSeq(ls, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == s.Ref() {
				manifest = f[2]
			}
		}
		if manifest == "" {
			t.Fatalf("%s not listed after import:\n%s", s.Ref(), ls)
		}
		if m := c.ctr(t, "content", "get", manifest); !strings.Contains(m, `"digest":"`+ids[n]+`"`) {
			t.Errorf("%s: manifest %s does not name the configuration %s", s.Ref(), m, ids[n])
		}
	}

	// kube-apiserver, by its name alone (PATH), reports the version.
	if out := c.ctr(t, "run", "--rm", "--runc-root", c.runcRoot, "--fifo-dir", c.fifoDir, "--cgroup", c.cgroup+"/apiserver",
		images["apiserver"].Ref(), "apiserver", "kube-apiserver", "--version"); strings.TrimSpace(out) != "Kubernetes "+harness.Kubernetes {
		t.Errorf("kube-apiserver --version in its image: %q", out)
	}

	// pause runs until SIGTERM and then exits 0 (ctr run exits with the
	// task's status).
	run := exec.CommandContext(ctx, "ctr", append(c.args(), "run", "--rm", "--runc-root", c.runcRoot, "--fifo-dir", c.fifoDir,
		"--cgroup", c.cgroup+"/pause", images["pause"].Ref(), "pause")...)
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	waitFor(t, 2*time.Minute, "the pause task running", func() bool {
		return strings.Contains(c.ctrMaybe("task", "ls"), "RUNNING")
	})
	select {
	case err := <-done:
		t.Fatalf("pause exited before it was told to: %v\n%s", err, runOut.String())
	case <-time.After(500 * time.Millisecond):
	}
	c.ctr(t, "task", "kill", "--signal", "SIGTERM", "pause")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause on SIGTERM: %v, want exit 0\n%s", err, runOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("pause still running a minute after SIGTERM\n%s", runOut.String())
	}
}

// containerd is a containerd of the test's own.
type containerd struct {
	dir, sock, runcRoot, fifoDir, cgroup string
}

func (c *containerd) args() []string { return []string{"--address", c.sock, "--namespace", "k8s.io"} }

func (c *containerd) ctrMaybe(args ...string) string {
	out, _ := exec.Command("ctr", append(c.args(), args...)...).CombinedOutput()
	return string(out)
}

func (c *containerd) ctr(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ctr", append(c.args(), args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startContainerd starts a containerd whose root, state, sockets and
// plugin directories are under a directory of its own, with the CRI plugin
// off, and registers its removal: every task killed and deleted, the
// daemon and the shims stopped, mounts under its directory unmounted, its
// cgroup removed from every hierarchy, and /run/containerd/s (where
// containerd 1.6 puts shim sockets whatever its configuration says)
// removed when this test created it and it is empty.
func startContainerd(t *testing.T, work string) *containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{
		dir: dir, sock: filepath.Join(dir, "containerd.sock"),
		runcRoot: filepath.Join(dir, "runc"), fifoDir: filepath.Join(dir, "fifo"),
		cgroup: fmt.Sprintf("/steward-images-%d", os.Getpid()),
	}
	_, shimDirErr := os.Stat("/run/containerd/s")
	_, runDirErr := os.Stat("/run/containerd")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc", filepath.Join(dir, "opt"))
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Not the test's context: the cleanup stops it.
	cmd := exec.Command("containerd", "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Tasks and containers first, while containerd runs.
		for _, id := range []string{"apiserver", "pause"} {
			_, _ = exec.Command("ctr", append(c.args(), "task", "kill", "--signal", "SIGKILL", id)...).CombinedOutput()
			_, _ = exec.Command("ctr", append(c.args(), "task", "delete", "--force", id)...).CombinedOutput()
			_, _ = exec.Command("ctr", append(c.args(), "containers", "delete", id)...).CombinedOutput()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = logf.Close()
		killReferring(t, dir) // shims left behind (own process groups)
		unmountUnder(t, dir)
		removeCgroup(t, c.cgroup)
		if os.IsNotExist(shimDirErr) {
			_ = os.Remove("/run/containerd/s") // rmdir: kept while another containerd's shims use it
		}
		if os.IsNotExist(runDirErr) {
			_ = os.Remove("/run/containerd")
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil {
				t.Logf("containerd log (end):\n%s", lastLines(string(b), 30))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	waitFor(t, time.Minute, "containerd answering", func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd exited at start:\n%s", lastLines(string(b), 30))
		default:
		}
		return exec.Command("ctr", "--address", c.sock, "version").Run() == nil
	})
	return c
}

// killReferring kills every process whose command line names dir.
func killReferring(t *testing.T, dir string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil && pid != os.Getpid() {
			t.Logf("killing leftover %d: %s", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder unmounts every mount point below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", points[i], err)
		}
	}
}

// removeCgroup removes a cgroup (and the empty groups under it) from
// every hierarchy it is in.
func removeCgroup(t *testing.T, cg string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cg))
	if d := filepath.Join("/sys/fs/cgroup", cg); isDir(d) {
		dirs = append(dirs, d) // cgroup v2
	}
	for _, d := range dirs {
		subs, _ := filepath.Glob(filepath.Join(d, "*"))
		for _, s := range subs {
			if isDir(s) {
				_ = os.Remove(s)
			}
		}
		if err := os.Remove(d); err != nil {
			t.Errorf("remove cgroup %s: %v", d, err)
		}
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
