package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
)

// checkEnv names the snapshot a process started by inspectInChild checks.
// Any binary that links this package (steward, and the test binaries of
// the packages that use it) becomes the checker when it is set: init below
// runs the check and exits before main or the tests start.
const checkEnv = "STEWARD_INTERNAL_CHECK_SNAPSHOT"

// prepareEnv, set to 1 beside checkEnv, makes the child open the snapshot
// for writing and leave its freelist written (snapshotStatus's prepare).
const prepareEnv = "STEWARD_INTERNAL_CHECK_SNAPSHOT_PREPARE"

// checkTimeout bounds one consistency check in the child.
const checkTimeout = 10 * time.Minute

// ErrMalformedSnapshot: bbolt crashed (panicked, or was killed) reading the
// snapshot database; the database is malformed beyond what its consistency
// check reports as errors.
var ErrMalformedSnapshot = errors.New("snapshot database is malformed")

func init() {
	if p := os.Getenv(checkEnv); p != "" {
		os.Exit(checkChild(p, os.Getenv(prepareEnv) == "1"))
	}
}

// childResult is what the checking child writes to its stdout.
type childResult struct {
	Info  SnapshotInfo `json:"info"`
	Error string       `json:"error,omitempty"`
}

// checkChild runs in the child: it inspects path in this process (where a
// panic of bbolt ends only the child) and writes a childResult.
func checkChild(path string, prepare bool) int {
	var r childResult
	info, err := inspectHere(path, prepare)
	if err != nil {
		r.Error = err.Error()
	}
	r.Info = info
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 3
	}
	return 0
}

// inspectInChild runs inspectHere in a child process (this executable,
// with checkEnv, and prepareEnv when prepare is set, and nothing else of
// this process's environment) and returns its result. A child that panics
// or dies makes an error wrapping ErrMalformedSnapshot that quotes the
// panic's first line, not its trace.
func inspectInChild(ctx context.Context, path string, prepare bool) (SnapshotInfo, error) {
	// /proc/self/exe runs this very executable even when its file was
	// replaced since it started (an upgraded steward under a running agent).
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return SnapshotInfo{}, fmt.Errorf("check snapshot database: locate the steward executable: %w", err)
		}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	env := []string{checkEnv + "=" + path}
	if prepare {
		env = append(env, prepareEnv+"=1")
	}
	cmd.Env = childenv.With(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r childResult
	if runErr == nil {
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			return SnapshotInfo{}, fmt.Errorf("check snapshot database: the checking process wrote %q: %w", firstLine(stdout.String()), err)
		}
		if r.Error != "" {
			return SnapshotInfo{}, errors.New(r.Error)
		}
		return r.Info, nil
	}
	if err := parent.Err(); err != nil {
		// The caller gave up (an operator's interrupt, an agent stopping):
		// nothing is known about the snapshot.
		return SnapshotInfo{}, fmt.Errorf("check snapshot database: %w", err)
	}
	if ctx.Err() != nil {
		return SnapshotInfo{}, fmt.Errorf("check snapshot database: %w: the check did not finish in %s", ErrMalformedSnapshot, checkTimeout)
	}
	var ee *exec.ExitError
	if !errors.As(runErr, &ee) {
		return SnapshotInfo{}, fmt.Errorf("check snapshot database: run the checking process: %w", runErr)
	}
	why := panicLine(stderr.String())
	if why == "" {
		why = runErr.Error()
	}
	return SnapshotInfo{}, fmt.Errorf("%w: reading it crashed bbolt (%s)", ErrMalformedSnapshot, why)
}

// panicLine returns the "panic: ..." line of a Go crash's output ("fatal
// error: ..." for a runtime fault), or "".
func panicLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// inspectHere is Inspect (or, with prepare, checkToWrite) in this process:
// read the revisions, then run bbolt's consistency check and etcd's
// snapshot hash (snapshotStatus, as etcdutl's snapshot status).
func inspectHere(path string, prepare bool) (SnapshotInfo, error) {
	info, err := InspectRevision(path)
	if err != nil {
		return SnapshotInfo{}, err
	}
	st, err := snapshotStatus(path, prepare)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot database fails its consistency check: %w", err)
	}
	info.Hash, info.TotalKey, info.Version = st.Hash, st.TotalKey, st.Version
	return info, nil
}
