package localkube_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
)

// TestChildCluster is the child of the tests below, not a test of its own:
// run by them (childEnv set), it brings up a one-node cluster in
// LOCALKUBE_TEST_DIR, prints "READY", and holds it until SIGTERM (then
// removes it, as `localkube up`'s supervisor does) or SIGKILL.
func TestChildCluster(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the child of TestMachineUnchangedAfterDown and TestLeftoversOfKilledRunRemoved")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	root := harness.RepoRoot(t)
	cfg, err := harness.LocalKubeConfig(root, os.Getenv("LOCALKUBE_TEST_DIR"), os.Getenv("STEWARD_TEST_BINARY"), 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Log = os.Stderr
	// One bring-up at a time on the machine (harness.LocalKubeUpLock).
	lock, err := harness.LocalKubeUpLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c, err := localkube.Up(context.Background(), cfg)
	if lock != nil {
		lock.Release()
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	<-sig
	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
}

// child starts TestChildCluster in a process of its own and returns once
// its cluster is up.
func child(t *testing.T) *exec.Cmd {
	t.Helper()
	shared := harness.LocalKube(t) // its steward binary; and no child without a working cluster
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildCluster$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1", "LOCALKUBE_TEST_DIR="+t.TempDir(), "STEWARD_TEST_BINARY="+shared.Steward)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_, _ = localkube.RemoveOwned(cmd.Process.Pid)
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var lines []string
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
			lines = append(lines, sc.Text())
		}
		ready <- fmt.Errorf("child exited before its cluster was up: %s", strings.Join(lines, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("child cluster not up after 5 minutes")
	}
	return cmd
}

// ownedBy: a machine-state difference is one of the names of the cluster
// of owner (lk<PID>...), or the mount of one of its network namespaces.
func ownedBy(owner int, diff string) bool {
	return localkube.OwnedBy(owner).MatchString(diff)
}

// anyOwner finds a localkube name (lk<PID>...) and its owner's PID.
var anyOwner = regexp.MustCompile(`lk([0-9]+)[bvnc][0-9]`)

// diffMachine is the machine's changes since before, what other steward
// test processes own left out (harness.MachineState), and the names of
// other processes' local clusters (lk<PID>... of a PID neither this
// process nor one of owners: another test package's cluster coming or
// going); sysctls registered or removed meanwhile (a module loaded:
// nf_conntrack's) are logged, not returned.
func diffMachine(t *testing.T, before map[string]bool, owners ...int) []string {
	after := harness.MachineState()
	changes, appeared := harness.SplitSysctls(before, after, harness.DiffMachine(before, after))
	if len(appeared) > 0 {
		t.Logf("sysctls registered or removed meanwhile: %s", harness.FormatDiff(appeared))
	}
	var mine []string
	others := 0
	for _, d := range changes {
		if m := anyOwner.FindStringSubmatch(d); m != nil {
			pid, _ := strconv.Atoi(m[1])
			if pid != os.Getpid() && !slices.Contains(owners, pid) {
				others++
				continue
			}
		}
		mine = append(mine, d)
	}
	if others > 0 {
		t.Logf("%d change(s) of other processes' local clusters left out", others)
	}
	return mine
}

// TestMachineUnchangedAfterDown: while a cluster runs, the machine differs
// only by the cluster's own names (its bridge, veths, namespaces, cgroups):
// no sysctl, iptables rule or mount of the root namespace; and removed on
// SIGTERM to its owner, it leaves the machine exactly as it was.
func TestMachineUnchangedAfterDown(t *testing.T) {
	before := harness.MachineState()
	cmd := child(t)
	during := diffMachine(t, before, cmd.Process.Pid)
	var foreign []string
	owned := 0
	for _, d := range during {
		if ownedBy(cmd.Process.Pid, d) {
			owned++
		} else {
			foreign = append(foreign, d)
		}
	}
	if len(foreign) > 0 {
		t.Errorf("a running cluster changed the machine beyond its own names: %s", harness.FormatDiff(foreign))
	}
	if owned == 0 {
		t.Errorf("no name of the running cluster (lk%d...) found: the check sees nothing", cmd.Process.Pid)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if d := diffMachine(t, before, cmd.Process.Pid); len(d) > 0 {
		t.Errorf("the machine after the cluster's removal: %s", harness.FormatDiff(d))
	}
}

// TestLeftoversOfKilledRunRemoved: a cluster whose owner was killed
// (SIGKILL: no cleanup ran) keeps running; the next run's CleanupStale
// removes all of it, processes included.
func TestLeftoversOfKilledRunRemoved(t *testing.T) {
	before := harness.MachineState()
	cmd := child(t)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	left := diffMachine(t, before, cmd.Process.Pid)
	if len(left) == 0 {
		t.Fatal("a killed owner left nothing: the test kills too late or checks nothing")
	}
	removed, err := localkube.CleanupStale()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %s", strings.Join(removed, ", "))
	if d := diffMachine(t, before, cmd.Process.Pid); len(d) > 0 {
		t.Errorf("after CleanupStale: %s", harness.FormatDiff(d))
	}
}

// TestMachineUnchangedAfterFailedUp: a bring-up that fails half-way (an
// image tarball containerd refuses, once the network, namespaces, cgroups,
// etcd, the S3 server and containerd run) removes everything it made
// before it returns the error.
func TestMachineUnchangedAfterFailedUp(t *testing.T) {
	shared := harness.LocalKube(t)
	before := harness.MachineState()
	cfg, err := harness.LocalKubeConfig(harness.RepoRoot(t), t.TempDir(), shared.Steward, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir() + "/broken.tar"
	if err := os.WriteFile(bad, []byte("not an image"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Images = append(cfg.Images, bad)
	c, err := localkube.Up(t.Context(), cfg)
	if err == nil {
		_ = c.Down()
		t.Fatal("Up imported a tarball that is no image")
	}
	if !strings.Contains(err.Error(), "broken.tar") {
		t.Errorf("error does not name the tarball: %v", err)
	}
	if d := diffMachine(t, before); len(d) > 0 {
		t.Errorf("the machine after a failed bring-up: %s", harness.FormatDiff(d))
	}
}

// TestChildHold is the child of TestSignalDuringUp: a test of a package
// whose TestMain is LocalKubeMain, holding until the signal.
func TestChildHold(t *testing.T) {
	if os.Getenv(childEnv) != "main" {
		t.Skip("the child of TestSignalDuringUp")
	}
	harness.LocalKube(t) // a failed bring-up ends the child at once
	<-t.Context().Done()
}

// TestSignalDuringUp: SIGINT to a test process whose shared cluster is
// coming up (its nodes' containerd running) removes everything before the
// process exits.
func TestSignalDuringUp(t *testing.T) {
	shared := harness.LocalKube(t)
	before := harness.MachineState()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildHold$", "-test.v")
	// The child's TMPDIR, where its cluster's directory goes: short, for
	// the Unix sockets under it (t.TempDir's would be too long).
	tmp, err := os.MkdirTemp("", "lks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	cmd.Env = append(os.Environ(), childEnv+"=main", "STEWARD_TEST_BINARY="+shared.Steward, "TMPDIR="+tmp,
		"STEWARD_TEST_KUBE_VERSIONS=") // one cluster, of LocalKubeVersion
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_, _ = localkube.RemoveOwned(cmd.Process.Pid)
	})
	mid := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if !sent && strings.Contains(sc.Text(), "nodes' containerd and images") {
				mid <- true
				sent = true
			}
		}
		if !sent {
			mid <- false
		}
	}()
	select {
	case ok := <-mid:
		if !ok {
			t.Fatal("the child's cluster never reached containerd")
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("the child's cluster never reached containerd")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if err == nil {
		t.Errorf("the interrupted child exited 0")
	}
	if d := diffMachine(t, before, cmd.Process.Pid); len(d) > 0 {
		t.Errorf("the machine after SIGINT during the bring-up: %s", harness.FormatDiff(d))
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("the interrupted child left %s in its TMPDIR", ents[0].Name())
	}
}
