package harness

// LocalKube: one local Kubernetes (internal/localkube) shared by the tests
// of a package. TestMain calls LocalKubeMain, which brings it up before the
// tests run and removes it after them, pass or fail, and on SIGINT or
// SIGTERM; a killed test process's cluster is removed by the next one
// (localkube.CleanupStale, run by Up). Tests get it with LocalKube.
//
// STEWARD_TEST_KUBE_VERSIONS lists further versions: LocalKubeMain brings
// up one cluster of each (one after the other, all there while the tests
// run), and a test that proves a version works runs once per cluster with
// ForEachLocalKube, as subtests named by the version (TestX/v1.35.4).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/etcd-steward/steward/internal/filelock"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/localkube"
)

var (
	// Set by LocalKubeMain before m.Run and read by the tests after: no
	// lock needed (m.Run's goroutines start after the writes). localKubes
	// holds one cluster per LocalKubeVersions, in its order.
	localKubes   []*localkube.Cluster
	localKubeErr error
)

// LocalKubeVersion is the Kubernetes version the tests run:
// STEWARD_TEST_KUBE_VERSION, else Kubernetes (v1.36.3).
func LocalKubeVersion() string {
	if v := os.Getenv("STEWARD_TEST_KUBE_VERSION"); v != "" {
		return v
	}
	return Kubernetes
}

// LocalKubeVersions are the versions LocalKubeMain brings up a cluster of:
// LocalKubeVersion first (the cluster LocalKube returns), then those of
// STEWARD_TEST_KUBE_VERSIONS (separated by spaces or commas; `make test`
// passes KUBE_VERSIONS) not already listed.
func LocalKubeVersions() []string {
	vs := []string{LocalKubeVersion()}
	for _, v := range strings.FieldsFunc(os.Getenv("STEWARD_TEST_KUBE_VERSIONS"), func(r rune) bool { return r == ' ' || r == ',' }) {
		if !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	return vs
}

// LocalKubeConfig is the configuration of a cluster of nodes nodes in dir
// from the project's caches: the Kubernetes binaries (.cache/kube, or
// STEWARD_KUBE_CACHE) and images (.cache/images, or STEWARD_IMAGES), the
// steward binary stewardBin and versitygw (STEWARD_TEST_VERSITYGW).
func LocalKubeConfig(root, dir, stewardBin string, nodes int) (localkube.Config, error) {
	return localKubeConfig(root, dir, stewardBin, nodes, LocalKubeVersion())
}

func localKubeConfig(root, dir, stewardBin string, nodes int, v string) (localkube.Config, error) {
	kubeCache := envOr("STEWARD_KUBE_CACHE", filepath.Join(root, ".cache", "kube"))
	images := envOr("STEWARD_IMAGES", filepath.Join(root, ".cache", "images"))
	cfg, err := localkube.FromCache(kubeCache, images, v)
	if err != nil {
		return cfg, err
	}
	cfg.Dir, cfg.Nodes, cfg.Steward = dir, nodes, stewardBin
	cfg.VersityGW = envOr("STEWARD_TEST_VERSITYGW", filepath.Join(root, ".cache", "bin", "versitygw"))
	return cfg, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// LocalKubeMain brings up a local Kubernetes of nodes nodes of each of
// LocalKubeVersions, runs the package's tests and removes the clusters
// (their directories too, unless a test failed and STEWARD_KEEP_FAILED is
// set). A failed bring-up fails every test that calls LocalKube, with the
// error.
func LocalKubeMain(m *testing.M, nodes int) int {
	return localKubeMain(m, nodes, LocalKubeVersions())
}

// LocalKubeMainOneVersion is LocalKubeMain with one cluster, of
// LocalKubeVersion, whatever STEWARD_TEST_KUBE_VERSIONS lists: for a
// package whose tests prove Steward's behaviour rather than a Kubernetes
// version's (the operator's), so `make test` does not run them twice.
func LocalKubeMainOneVersion(m *testing.M, nodes int) int {
	return localKubeMain(m, nodes, []string{LocalKubeVersion()})
}

func localKubeMain(m *testing.M, nodes int, versions []string) int {
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin := os.Getenv("STEWARD_TEST_BINARY")
	if bin == "" {
		dir, err := os.MkdirTemp("", "steward-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "steward")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/steward")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build steward: %v\n%s", err, out)
			return 1
		}
	}
	removeStaleDirs()
	before := MachineState()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // owns up and dirs
	var up []*localkube.Cluster
	var dirs []string
	upDone, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			// Up removes what it made when ctx ends; the clusters that
			// are up are removed here.
			fmt.Fprintf(os.Stderr, "localkube: %v: removing the cluster\n", s)
			cancel()
			<-upDone
			mu.Lock()
			cs, ds := slices.Clone(up), slices.Clone(dirs)
			mu.Unlock()
			for _, cc := range cs {
				_ = cc.Down()
			}
			if os.Getenv("STEWARD_KEEP_FAILED") == "" {
				for _, d := range ds {
					_ = localkube.RemoveDir(d)
				}
			}
			os.Exit(1)
		case <-stopped:
		}
	}()
	defer close(stopped)
	// One package's local Kubernetes at a time on the machine: packages
	// that each bring up clusters (localkube's two, the operator's) would
	// otherwise run nine kubelets and their containerds at once on two
	// cores, and nodes went NotReady past every timeout (two rehearsals of
	// 2026-11-28). The lock is held until the clusters are down; the
	// children a test of the package starts inherit it
	// (localKubeLockHeld in their environment) and do not wait for it.
	lock, lerr := LocalKubeUpLock(ctx)
	if lock != nil {
		defer lock.Release()
		_ = os.Setenv(localKubeLockHeld, "1")
	}
	if lerr != nil {
		err = lerr
		localKubeErr = fmt.Errorf("local Kubernetes: %w", lerr)
	}
	for _, v := range versions {
		if lerr != nil {
			break
		}
		if err = upOne(ctx, root, bin, nodes, v, &mu, &up, &dirs); err != nil {
			localKubeErr = fmt.Errorf("local Kubernetes %s: %w", v, err)
			break
		}
	}
	close(upDone)
	cancel()
	mu.Lock()
	clusters, clusterDirs := slices.Clone(up), slices.Clone(dirs)
	mu.Unlock()
	localKubes = clusters
	code := m.Run()
	for _, c := range clusters {
		if err := c.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "localkube: remove the cluster of %s: %v\n", c.Version, err)
			code = 1
		}
	}
	if len(clusters) > 0 {
		// The machine as it was: sysctls and iptables rules whoever may
		// have changed them (nothing else on the machine should), the
		// other kinds where they name these clusters (other test
		// processes make and remove their own meanwhile).
		var left []string
		after := MachineState()
		changes, appeared := SplitSysctls(before, after, DiffMachine(before, after))
		if len(appeared) > 0 {
			fmt.Fprintf(os.Stderr, "localkube: sysctls registered or removed meanwhile (modules loaded): %s\n", FormatDiff(appeared))
		}
		for _, d := range changes {
			if strings.Contains(d, "sysctl: ") || strings.Contains(d, "iptables-save: ") || localkube.OwnedBy(clusters[0].Owner).MatchString(d) {
				left = append(left, d)
			}
		}
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "localkube: the machine after the clusters' removal: %s\n", FormatDiff(left))
			code = 1
		}
	}
	for _, dir := range clusterDirs {
		if code != 0 && os.Getenv("STEWARD_KEEP_FAILED") != "" {
			fmt.Fprintf(os.Stderr, "localkube: keeping %s\n", dir)
		} else if err := localkube.RemoveDir(dir); err != nil {
			// Through the mount guard: a failed Down may leave a node's
			// mounts there, and RemoveAll would delete through them.
			fmt.Fprintf(os.Stderr, "localkube: %v\n", err)
		}
	}
	return code
}

// upOne brings up the cluster of version v in a directory of its own,
// recording both (under mu) for the removal on a signal. A cluster that
// did not come up has removed what it made; its directory is recorded.
func upOne(ctx context.Context, root, bin string, nodes int, v string, mu *sync.Mutex, up *[]*localkube.Cluster, dirs *[]string) error {
	dir, err := os.MkdirTemp("", fmt.Sprintf("localkube-%d-", os.Getpid()))
	if err != nil {
		return err
	}
	mu.Lock()
	*dirs = append(*dirs, dir)
	mu.Unlock()
	cfg, err := localKubeConfig(root, dir, bin, nodes, v)
	if err != nil {
		return err
	}
	cfg.Log = os.Stderr
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c, err := localkube.Up(ctx, cfg)
	if err != nil {
		return err
	}
	mu.Lock()
	*up = append(*up, c)
	mu.Unlock()
	return nil
}

// LocalKube returns the package's cluster of LocalKubeVersion
// (LocalKubeMain); a bring-up that failed fails the test.
func LocalKube(tb testing.TB) *localkube.Cluster {
	tb.Helper()
	return LocalKubes(tb)[0]
}

// LocalKubes returns the package's clusters, one per LocalKubeVersions in
// its order; a bring-up that failed fails the test.
func LocalKubes(tb testing.TB) []*localkube.Cluster {
	tb.Helper()
	if localKubeErr != nil {
		tb.Fatal(localKubeErr)
	}
	if len(localKubes) == 0 {
		tb.Fatal("no local Kubernetes: the package's TestMain must call harness.LocalKubeMain")
	}
	return localKubes
}

// ForEachLocalKube runs f on each of the package's clusters (LocalKubes),
// one after the other, as a subtest named by the cluster's version: the
// test names say which version ran.
func ForEachLocalKube(t *testing.T, f func(t *testing.T, c *localkube.Cluster)) {
	t.Helper()
	for _, c := range LocalKubes(t) {
		t.Run(c.Version, func(t *testing.T) { f(t, c) })
	}
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", fmt.Errorf("repository root (go.mod) not found above %s", strings.TrimSpace(d))
		}
		d = p
	}
}

// removeStaleDirs removes the cluster directories (TMPDIR/localkube-PID-*)
// of test processes no longer alive: a killed run's cluster is removed by
// the next Up (localkube.CleanupStale), its directory here.
func removeStaleDirs() {
	// Their processes first: they may still write there.
	if _, err := localkube.CleanupStale(); err != nil {
		fmt.Fprintf(os.Stderr, "localkube: leftovers of killed runs: %v\n", err)
	}
	ents, _ := os.ReadDir(os.TempDir())
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "localkube-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = localkube.RemoveDir(filepath.Join(os.TempDir(), e.Name()))
	}
}

// LocalKubeUpLock takes the machine's bring-up lock of local Kubernetes
// clusters (LocalKubeMain holds it while it brings its clusters up; a test
// that brings up one of its own takes it too), waiting while another
// process holds it, until ctx ends. Release it once the cluster is up.
func LocalKubeUpLock(ctx context.Context) (*filelock.Lock, error) {
	if os.Getenv(localKubeLockHeld) != "" {
		return nil, nil // a parent test process holds it for this one
	}
	// Machine-wide, as subnet.Lock: not in TMPDIR, which a test may give a
	// child of its own.
	dir := "/run/lock"
	if _, err := os.Stat(dir); err != nil {
		dir = os.TempDir()
	}
	return waitFileLock(ctx, filepath.Join(dir, "steward-localkube-up.lock"))
}

// localKubeLockHeld in a process's environment says its parent test
// process holds the local Kubernetes lock (LocalKubeMain).
const localKubeLockHeld = "STEWARD_LOCALKUBE_LOCK_HELD"

// waitFileLock takes the file lock at path, polling while another process
// holds it, until ctx ends.
func waitFileLock(ctx context.Context, path string) (*filelock.Lock, error) {
	for {
		l, err := filelock.TryLock(path)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, filelock.ErrHeld) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// LocalKubeBenchMain is the TestMain of a benchmark package whose
// benchmarks run in a local Kubernetes (test/bench/operator): it brings
// up one cluster of nodes nodes (LocalKubeMainOneVersion) only when the
// -test.bench pattern selects one of benchmarks (the package's benchmark
// names), so a `make bench BENCH=...` of other benchmarks, or a run of
// the package's tests alone, neither pays the bring-up nor waits for the
// machine's local-Kubernetes lock; it then runs the package without a
// cluster. Either way it removes the steward build of Binary afterwards,
// as Main does.
func LocalKubeBenchMain(m *testing.M, nodes int, benchmarks ...string) int {
	flag.Parse()
	pattern := ""
	if f := flag.Lookup("test.bench"); f != nil {
		pattern = f.Value.String()
	}
	var code int
	if BenchSelects(pattern, benchmarks...) {
		code = LocalKubeMainOneVersion(m, nodes)
	} else {
		code = m.Run()
	}
	if buildPath != "" {
		_ = os.RemoveAll(filepath.Dir(buildPath))
	}
	return code
}

// BenchSelects says whether go test's -bench pattern selects one of the
// top-level benchmarks names: as go test splits a pattern, into
// alternatives at each '|' and levels at each '/' outside brackets and
// parentheses, the first level of an alternative matches a name. An
// empty pattern selects none; one that does not compile selects them all
// (go test refuses it anyway).
func BenchSelects(pattern string, names ...string) bool {
	if pattern == "" {
		return false
	}
	var firsts []string
	brackets, parens, start, first := 0, 0, 0, true
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '[':
			brackets++
		case ']':
			if brackets--; brackets < 0 {
				brackets = 0
			}
		case '(':
			if brackets == 0 {
				parens++
			}
		case ')':
			if brackets == 0 {
				parens--
			}
		case '\\':
			i++
		case '/':
			if brackets == 0 && parens == 0 && first {
				firsts = append(firsts, pattern[start:i])
				first = false
			}
		case '|':
			if brackets == 0 && parens == 0 {
				if first {
					firsts = append(firsts, pattern[start:i])
				}
				start, first = i+1, true
			}
		}
	}
	if first {
		firsts = append(firsts, pattern[start:])
	}
	for _, f := range firsts {
		re, err := regexp.Compile(f)
		if err != nil {
			return true
		}
		for _, n := range names {
			if re.MatchString(n) {
				return true
			}
		}
	}
	return false
}
