// Package harness runs the real steward binary against real etcd processes
// for end-to-end tests and benchmarks. It builds steward once per test
// binary, gives each test a short Steward directory of its own, and tears
// down every process it started when the test ends, even on failure.
//
// The steward binary is race-built by default (see Race in race.go): a data
// race that any Steward process reports, on the CLI's stderr or in the
// agent's and members' logs, fails the test.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// Versions are the etcd versions the suite runs against, one per minor.
// STEWARD_TEST_VERSIONS overrides them (comma-separated).
func Versions() []string {
	if v := os.Getenv("STEWARD_TEST_VERSIONS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"3.5.35", "3.6.16", "3.7.3"}
}

// RepoRoot finds the repository root from the working directory.
func RepoRoot(tb testing.TB) string {
	d, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			tb.Fatal("repository root (go.mod) not found")
		}
		d = p
	}
}

// FreePorts returns n distinct ports that are free on 127.0.0.1 now
// (spec.FreePort), failing the test when there are not. A test with an Env
// draws from its own address instead (Env.FreePorts).
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	return freePorts(tb, "127.0.0.1", n)
}

// FreePorts returns n distinct ports free on the test's own address.
func (e *Env) FreePorts(n int) []int {
	e.TB.Helper()
	return freePorts(e.TB, e.Addr, n)
}

// URL is scheme://Addr:port, a URL on the test's own address.
func (e *Env) URL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort(e.Addr, strconv.Itoa(port))
}

func freePorts(tb testing.TB, host string, n int) []int {
	tb.Helper()
	free := spec.FreePort(host)
	ports := make([]int, n)
	for i := range ports {
		p, err := free()
		if err != nil {
			tb.Fatal(err)
		}
		ports[i] = p
	}
	return ports
}

// Store returns the binary store holding the test versions. A missing
// version fails the test: a skipped end-to-end test must not pass.
//
// The store must hold Steward's embedded etcd version too, whatever
// STEWARD_TEST_VERSIONS says: the agent runs a member from the store when
// the store has its version (pkg/binaries.Store.Resolve), and the embedded
// server (`steward etcd`, the steward binary itself) only otherwise. So
// members never run the race-built steward binary: etcd's own code is not
// what the race detector is there for, and a race-built etcd is slow.
func Store(tb testing.TB) string {
	s := os.Getenv("STEWARD_TEST_STORE")
	if s == "" {
		s = filepath.Join(RepoRoot(tb), ".cache", "store")
	}
	for _, v := range Versions() {
		if _, err := os.Stat(filepath.Join(s, "etcd-v"+v, "etcd")); err != nil {
			tb.Fatalf("etcd %s is missing from the test binary store %s: run `make etcd-binaries`", v, s)
		}
		// Steward runs no stored binary without its recorded SHA-256.
		if _, err := os.Stat(filepath.Join(s, "etcd-v"+v, binaries.ManifestName)); err != nil {
			tb.Fatalf("etcd %s in the test binary store %s has no %s (Steward refuses to run it): run `make etcd-binaries`, which imports it again", v, s, binaries.ManifestName)
		}
	}
	if v := binaries.EmbeddedVersion(); !slices.Contains(Versions(), v) {
		if _, err := os.Stat(filepath.Join(s, "etcd-v"+v, "etcd")); err != nil {
			tb.Fatalf("etcd %s, Steward's embedded version, is missing from the test binary store %s: its members would run the embedded server of the test's steward binary (race-built); run `make etcd-binaries`", v, s)
		}
	}
	return s
}

// The build's result: written once inside buildOnce.Do, read only after Do
// returned (Do orders the two), so any test goroutine may call Binary.
var (
	buildOnce sync.Once
	goraceSet sync.Once
	buildPath string
	buildErr  error
)

// setGORACE sets GORACE (unless the caller did) once per test process:
// every steward process the tests start inherits it: those of Run, the
// agents they start, and the tests' own exec.Command(e.Bin, ...).
func setGORACE() {
	goraceSet.Do(func() {
		if os.Getenv("GORACE") == "" {
			_ = os.Setenv("GORACE", GORACE)
		}
	})
}

// Binary builds the steward binary once per test process: with the race
// detector (go build -race) unless Race is false. STEWARD_TEST_BINARY names
// one built already (make test builds it once for every end-to-end package,
// with -race unless RACE is empty, and sets STEWARD_TEST_RACE to match).
func Binary(tb testing.TB) string {
	if p := os.Getenv("STEWARD_TEST_BINARY"); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("STEWARD_TEST_BINARY: %v (make test builds it)", err)
		}
		if Race {
			setGORACE()
		}
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "steward-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "steward")
		args := []string{"build"}
		if Race {
			args = append(args, "-race")
			setGORACE()
		}
		cmd := exec.Command("go", append(args, "-o", buildPath, "./cmd/steward")...)
		cmd.Dir = RepoRoot(tb)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			hint := ""
			if Race {
				hint = " (with -race, which needs cgo and a C compiler; STEWARD_TEST_RACE=0 builds without it)"
			}
			buildErr = fmt.Errorf("build steward%s: %v\n%s", hint, err, out)
			return
		}
		tb.Logf("built %s (race detector: %v, GORACE=%q) in %s", buildPath, Race, os.Getenv("GORACE"), time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildPath
}

// Main runs the tests of a package whose tests build steward (Binary)
// and then removes that build, whatever their result: TestMain calls it.
// Every test and its cleanups have returned when m.Run does, so nothing
// reads buildPath concurrently.
func Main(m *testing.M) int {
	code := m.Run()
	if buildPath != "" {
		_ = os.RemoveAll(filepath.Dir(buildPath))
	}
	return code
}

// Env is one test's Steward directory and binary. Its fields never change
// after New, so a test's goroutines may share it (Run, Status, Client from
// a writer goroutine); only the test's own goroutine may call the methods
// that stop the test on failure (MustRun, MustFail, Spec, Status...), as
// with testing.TB's FailNow.
type Env struct {
	TB    testing.TB
	Dir   string
	Bin   string
	Store string
	// Addr is the test's own loopback address (LoopbackAddr): Up and
	// WriteSpec put the members there, and FreePorts draws from it.
	Addr string
}

// New returns an Env with a fresh, short Steward directory (Unix socket
// paths are limited to about 100 bytes) and a loopback address of its own.
// Cleanup stops everything it ran, then gives the address back.
func New(tb testing.TB) *Env {
	tb.Helper()
	addr := LoopbackAddr(tb)
	dir, err := os.MkdirTemp("", "stw-")
	if err != nil {
		tb.Fatal(err)
	}
	e := &Env{TB: tb, Dir: dir, Bin: Binary(tb), Store: Store(tb), Addr: addr}
	tb.Cleanup(e.cleanup)
	return e
}

func (e *Env) cleanup() {
	_, stderr, err := e.Run("down")
	if err != nil && !strings.Contains(stderr, "nothing to stop") {
		e.TB.Errorf("cleanup: steward down: %v%s: %s", err, raceExit(err, stderr), stderr)
	}
	// Whatever down missed is a bug: kill it, and say so.
	if left := ProcessesUsing(e.Dir); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		e.TB.Errorf("cleanup: processes left running after steward down: %v", left)
	}
	// Every agent has stopped: its log is complete.
	e.checkLogRaces()
	if !e.TB.Failed() || os.Getenv("STEWARD_KEEP_FAILED") == "" {
		_ = os.RemoveAll(e.Dir)
	} else {
		e.TB.Logf("keeping %s", e.Dir)
	}
}

// ProcessesUsing lists live processes whose command line mentions dir.
func ProcessesUsing(dir string) []int {
	return proc.Find(func(args []string) bool { return strings.Contains(strings.Join(args, " "), dir) })
}

// Run runs steward with --dir set and returns stdout and stderr. A data
// race reported on stderr fails the test (without stopping it: Run may be
// called from any goroutine).
func (e *Env) Run(args ...string) (string, string, error) {
	e.TB.Helper()
	return e.runIn(e.Dir, args...)
}

// RunDir is Run with another Steward directory (a host's, in a
// multi-host test).
func (e *Env) RunDir(dir string, args ...string) (string, string, error) {
	e.TB.Helper()
	return e.runIn(dir, args...)
}

// runIn is Run with another Steward directory.
func (e *Env) runIn(dir string, args ...string) (string, string, error) {
	e.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, append(args, "--dir", dir)...)
	cmd.Env = append(os.Environ(), "STEWARD_DIR=")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	e.checkStderrRaces(args, se.String(), exitCode(err))
	return so.String(), se.String(), err
}

// exitCode is a command's exit code (0 on success, -1 when it did not exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// raceExit explains a failure that is the race detector's exit code.
func raceExit(err error, stderr string) string {
	if exitCode(err) == raceExitCode && strings.Contains(stderr, raceMarker) {
		return fmt.Sprintf(" (data race: %d is the race detector's exit code; the race is reported above)", raceExitCode)
	}
	return ""
}

// MustRun runs steward and fails the test on a non-zero exit.
func (e *Env) MustRun(args ...string) string {
	e.TB.Helper()
	so, se, err := e.Run(args...)
	if err != nil {
		e.TB.Fatalf("steward %s: %v%s\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, raceExit(err, se), so, se)
	}
	return so
}

// MustFail runs steward, requires a non-zero exit, and returns stderr.
func (e *Env) MustFail(args ...string) string {
	e.TB.Helper()
	so, se, err := e.Run(args...)
	if err == nil {
		e.TB.Fatalf("steward %s succeeded, want an error\nstdout: %s\nstderr: %s", strings.Join(args, " "), so, se)
	}
	return se
}

// Up starts an n-member cluster of etcd version v from the test store.
func (e *Env) Up(n int, v string) {
	e.TB.Helper()
	e.MustRun("up", "--members", strconv.Itoa(n), "--version", v, "--binary-store", e.Store, "--address", e.Addr)
}

// WriteSpec writes a spec of n members of etcd version (the test store's
// binaries) before `steward up`, so a test can set options first.
func (e *Env) WriteSpec(n int, version string, edit func(*spec.Cluster)) *spec.Cluster {
	e.TB.Helper()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: n, Version: version, StewardDir: e.Dir, Host: e.Addr, FreePort: spec.FreePort(e.Addr)})
	if err != nil {
		e.TB.Fatal(err)
	}
	s.BinaryStore = e.Store
	if edit != nil {
		edit(s)
	}
	if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		e.TB.Fatal(err)
	}
	return s
}

// Status returns `steward status -o json`, parsed.
func (e *Env) Status() *status.Status {
	e.TB.Helper()
	out := e.MustRun("status", "-o", "json")
	var st status.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		e.TB.Fatalf("parse status: %v\n%s", err, out)
	}
	return &st
}

// StoppedStatus returns `steward status -o json` of a stopped cluster
// (exit 1, cluster.stopped true: what the spec alone says), parsed; any
// other outcome fails the test.
func (e *Env) StoppedStatus() *status.Status {
	e.TB.Helper()
	so, se, err := e.Run("status", "-o", "json")
	var st status.Status
	if exitCode(err) != 1 || json.Unmarshal([]byte(so), &st) != nil || !st.Cluster.Stopped {
		e.TB.Fatalf("status -o json of a stopped cluster: %v, want exit 1 and cluster.stopped%s\nstdout: %s\nstderr: %s", err, raceExit(err, se), so, se)
	}
	return &st
}

// WaitStatus polls status until ok returns true, and fails the test with
// the last status (or the last error of `steward status`) when it does not
// within timeout.
func (e *Env) WaitStatus(timeout time.Duration, what string, ok func(*status.Status) bool) *status.Status {
	e.TB.Helper()
	var st *status.Status
	Eventually(e.TB, timeout, 250*time.Millisecond, what, func() error {
		so, se, err := e.Run("status", "-o", "json")
		if err != nil {
			return fmt.Errorf("steward status: %v: %s", err, strings.TrimSpace(se))
		}
		var s status.Status
		if err := json.Unmarshal([]byte(so), &s); err != nil {
			return fmt.Errorf("parse status: %v\n%s", err, so)
		}
		if st = &s; ok(st) {
			return nil
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		return fmt.Errorf("status:\n%s", b)
	})
	return st
}

// Eventually calls cond at once and then every interval until it holds,
// and fails the test with "timed out after TIMEOUT waiting for WHAT: last
// error: ERR" when it does not within timeout. It is the suite's one way
// to wait for a condition (Poll, for the waits whose timeout the caller
// handles itself, is the same loop).
//
// cond returns nil once the condition holds, and otherwise what is still
// wrong (an error of its own, or one that says which state it saw).
func Eventually(tb testing.TB, timeout, interval time.Duration, what string, cond func() error) {
	tb.Helper()
	if err := Poll(timeout, interval, cond); err != nil {
		tb.Fatalf("timed out after %s waiting for %s: last error: %v", timeout, what, errors.Unwrap(err))
	}
}

// Poll calls cond at once and then every interval until it returns nil
// (Poll returns nil) or timeout passes: then Poll returns "timed out after
// TIMEOUT: last error: ERR", wrapping cond's last error. It is for waits
// whose timeout is not a failure by itself, or whose failure the caller
// reports with more than the last error (a log, say); the others use
// Eventually.
func Poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s: last error: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Spec loads the cluster spec.
func (e *Env) Spec() *spec.Cluster {
	e.TB.Helper()
	s, err := spec.Load(filepath.Join(e.Dir, spec.FileName))
	if err != nil {
		e.TB.Fatal(err)
	}
	return s
}

// Client returns an etcd client for the given members (all when none).
func (e *Env) Client(members ...string) *clientv3.Client {
	e.TB.Helper()
	s := e.Spec()
	var eps []string
	for _, m := range s.Members {
		if len(members) == 0 || slices.Contains(members, m.Name) {
			eps = append(eps, m.ClientURL)
		}
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if !s.TLS.Disabled {
		tc, err := pki.ClientTLS(s.CertDir(e.Dir))
		if err != nil {
			e.TB.Fatal(err)
		}
		cfg.TLS = tc
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(func() { c.Close() })
	return c
}

// MemberPID returns the pid the agent recorded for a member.
func (e *Env) MemberPID(name string) int {
	e.TB.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir, "run", name+".pid"))
	if err != nil {
		e.TB.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		e.TB.Fatal(err)
	}
	return pid
}

// Healthy reports whether the cluster has settled: quorate, every member
// healthy, and none of them a learner. A learner counts as a healthy member
// while it catches up, yet refuses linearizable reads ("rpc not supported
// for learner"), so a test that reads through every endpoint right after a
// member was added (a recovery, a replace) must wait for its promotion too.
func Healthy(st *status.Status) bool {
	return st.Cluster.Quorate && st.Cluster.HealthyMembers == len(st.Members) && len(st.Members) > 0 && st.Cluster.Learners == 0
}

// Cond returns a condition's status ("" when absent).
func Cond(st *status.Status, t string) status.Condition {
	c, _ := st.Condition(t)
	return c
}

// KillAll kills the agent and every running member (those with a pid
// file) with SIGKILL at once: a host losing power, as far as Steward's
// processes can tell.
func (e *Env) KillAll() {
	e.TB.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir, "run", "agent.pid"))
	if err != nil {
		e.TB.Fatal(err)
	}
	agentPID, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		e.TB.Fatal(err)
	}
	pids := []int{agentPID}
	for _, m := range e.Spec().Members {
		if _, err := os.Stat(filepath.Join(e.Dir, "run", m.Name+".pid")); err == nil {
			pids = append(pids, e.MemberPID(m.Name))
		}
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// RunEnv is Run with extra environment variables (KEY=VALUE) for this one
// run, e.g. STEWARD_CRASHPOINT.
func (e *Env) RunEnv(env []string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, append(args, "--dir", e.Dir)...)
	cmd.Env = append(append(os.Environ(), "STEWARD_DIR="), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	return so.String(), se.String(), err
}

// IssuedClient issues a client certificate NAME valid for an hour with
// `steward certs issue-client` (into a temporary directory) and returns a
// client of every member with it, closed when the test ends. Tests that
// renew or rotate the admin certificate write through it: a client keeps
// the certificate it dialled with.
func (e *Env) IssuedClient(name string) *clientv3.Client {
	e.TB.Helper()
	out := filepath.Join(e.TB.TempDir(), name)
	e.MustRun("certs", "issue-client", name, "--validity", "1h", "--out", out)
	tc, err := pki.ClientTLSFiles(filepath.Join(out, "ca.crt"), filepath.Join(out, name+".crt"), filepath.Join(out, name+".key"))
	if err != nil {
		e.TB.Fatal(err)
	}
	var eps []string
	for _, m := range e.Spec().Members {
		eps = append(eps, m.ClientURL)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.TB.Fatal(err)
	}
	e.TB.Cleanup(func() { cli.Close() })
	return cli
}

// HTTPGet returns the body of a 200 response to GET u (10 s at most); any
// other status is an error quoting the body.
func HTTPGet(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return string(b), nil
}
