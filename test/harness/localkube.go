package harness

// LocalKube: one local Kubernetes (internal/localkube) shared by the tests
// of a package. TestMain calls LocalKubeMain, which brings it up before the
// tests run and removes it after them, pass or fail, and on SIGINT or
// SIGTERM; a killed test process's cluster is removed by the next one
// (localkube.CleanupStale, run by Up). Tests get it with LocalKube.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	// lock needed (m.Run's goroutines start after the writes).
	localKube    *localkube.Cluster
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

// LocalKubeConfig is the configuration of a cluster of nodes nodes in dir
// from the project's caches: the Kubernetes binaries (.cache/kube, or
// STEWARD_KUBE_CACHE) and images (.cache/images, or STEWARD_IMAGES), the
// steward binary stewardBin and versitygw (STEWARD_TEST_VERSITYGW).
func LocalKubeConfig(root, dir, stewardBin string, nodes int) (localkube.Config, error) {
	v := LocalKubeVersion()
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

// LocalKubeMain brings up a local Kubernetes of nodes nodes, runs the
// package's tests and removes the cluster (its directory too, unless a test
// failed and STEWARD_KEEP_FAILED is set). A failed bring-up fails every
// test that calls LocalKube, with the error.
func LocalKubeMain(m *testing.M, nodes int) int {
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
	dir, err := os.MkdirTemp("", fmt.Sprintf("localkube-%d-", os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	before := MachineState()
	cfg, err := LocalKubeConfig(root, dir, bin, nodes)
	cfg.Log = os.Stderr
	var c *localkube.Cluster
	if err == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var mu sync.Mutex // owns up
		var up *localkube.Cluster
		upDone, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			select {
			case s := <-sig:
				// Up removes what it made when ctx ends; a cluster that
				// is up is removed here.
				fmt.Fprintf(os.Stderr, "localkube: %v: removing the cluster\n", s)
				cancel()
				<-upDone
				mu.Lock()
				cc := up
				mu.Unlock()
				if cc != nil {
					_ = cc.Down()
				}
				if os.Getenv("STEWARD_KEEP_FAILED") == "" {
					_ = localkube.RemoveDir(dir)
				}
				os.Exit(1)
			case <-stopped:
			}
		}()
		defer close(stopped)
		c, err = localkube.Up(ctx, cfg)
		mu.Lock()
		up = c
		mu.Unlock()
		close(upDone)
		cancel()
	}
	localKube, localKubeErr = c, err
	if err != nil {
		localKubeErr = fmt.Errorf("local Kubernetes: %w", err)
	}
	code := m.Run()
	if c != nil {
		if err := c.Down(); err != nil {
			fmt.Fprintf(os.Stderr, "localkube: remove the cluster: %v\n", err)
			code = 1
		}
		// The machine as it was: sysctls and iptables rules whoever may
		// have changed them (nothing else on the machine should), the
		// other kinds where they name this cluster (other test processes
		// make and remove their own meanwhile).
		var left []string
		after := MachineState()
		changes, appeared := SplitSysctls(before, after, DiffMachine(before, after))
		if len(appeared) > 0 {
			fmt.Fprintf(os.Stderr, "localkube: sysctls registered or removed meanwhile (modules loaded): %s\n", FormatDiff(appeared))
		}
		for _, d := range changes {
			if strings.Contains(d, "sysctl: ") || strings.Contains(d, "iptables-save: ") || localkube.OwnedBy(c.Owner).MatchString(d) {
				left = append(left, d)
			}
		}
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "localkube: the machine after the cluster's removal: %s\n", FormatDiff(left))
			code = 1
		}
	}
	if code != 0 && os.Getenv("STEWARD_KEEP_FAILED") != "" {
		fmt.Fprintf(os.Stderr, "localkube: keeping %s\n", dir)
	} else {
		// Through the mount guard: a failed Down may leave a node's
		// mounts there, and RemoveAll would delete through them.
		if err := localkube.RemoveDir(dir); err != nil {
			fmt.Fprintf(os.Stderr, "localkube: %v\n", err)
		}
	}
	return code
}

// LocalKube returns the package's cluster (LocalKubeMain); a bring-up that
// failed fails the test.
func LocalKube(tb testing.TB) *localkube.Cluster {
	tb.Helper()
	if localKubeErr != nil {
		tb.Fatal(localKubeErr)
	}
	if localKube == nil {
		tb.Fatal("no local Kubernetes: the package's TestMain must call harness.LocalKubeMain")
	}
	return localKube
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
