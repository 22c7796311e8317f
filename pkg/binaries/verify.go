package binaries

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
)

const (
	// versionTimeout bounds each `etcd --version` run.
	versionTimeout = 30 * time.Second
	// versionPrefix starts the line of `etcd --version` naming the version.
	versionPrefix = "etcd Version: "
)

// VerifyResult is the outcome of verifying one stored version.
type VerifyResult struct {
	// Version is the etcd version verified.
	Version string `json:"version"`
	// OK is true when no problem was found.
	OK bool `json:"ok"`
	// Problems describes each mismatch found.
	Problems []string `json:"problems"`
}

// Verify recomputes the SHA-256 of every file of a stored version against
// its manifest and checks that `etcd --version` reports the version. The
// result lists each problem; the error is non-nil when there is any (or when
// the version is not in the store, wrapping ErrNotFound).
func (s *Store) Verify(ctx context.Context, version string) (VerifyResult, error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return VerifyResult{Version: version, Problems: []string{err.Error()}}, fmt.Errorf("verify etcd: %w", err)
	}
	res := VerifyResult{Version: v, Problems: []string{}}
	dir := s.versionDir(v)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		msg := fmt.Sprintf("not in the binary store %s", s.Dir)
		res.Problems = append(res.Problems, msg)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("verify etcd %s: %w", v, err)
		}
		return res, fmt.Errorf("verify etcd %s: %s: %w", v, msg, ErrNotFound)
	}
	res.Problems = s.check(ctx, v, dir)
	res.OK = len(res.Problems) == 0
	if !res.OK {
		return res, fmt.Errorf("verify etcd %s in %s: %d problem(s): %s",
			v, dir, len(res.Problems), strings.Join(res.Problems, "; "))
	}
	return res, nil
}

// VerifyAll verifies every version in the store (the embedded version is
// part of the steward binary and is not verified). The error joins the
// errors of the versions that failed.
func (s *Store) VerifyAll(ctx context.Context) ([]VerifyResult, error) {
	versions, err := s.storeVersions()
	if err != nil {
		return nil, fmt.Errorf("verify binary store: %w", err)
	}
	results := []VerifyResult{}
	var errs []error
	for _, v := range versions {
		r, err := s.Verify(ctx, v)
		results = append(results, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return results, errors.Join(errs...)
}

// check returns the problems of the version directory dir.
func (s *Store) check(ctx context.Context, v, dir string) []string {
	problems := []string{}
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	m, err := readManifest(dir)
	if err != nil {
		add("%v", err)
	} else if m.Version != v {
		add("manifest version is %q, want %q", m.Version, v)
	}
	for name := range m.Files {
		if !slices.Contains(tools(), name) {
			add("manifest lists unexpected file %q", name)
		}
	}
	for _, t := range tools() {
		p := filepath.Join(dir, t)
		want, listed := m.Files[t]
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if listed {
				add("%s: listed in the manifest but missing", t)
			} else if t == toolEtcd && m.Files != nil {
				add("%s: missing", t)
			}
			continue
		case err != nil:
			add("%s: %v", t, err)
			continue
		case !fi.Mode().IsRegular():
			add("%s: not a regular file", t)
			continue
		}
		if fi.Mode().Perm()&0o111 == 0 {
			add("%s: not executable (mode %v)", t, fi.Mode().Perm())
		}
		if !listed {
			if m.Files != nil {
				add("%s: present but not in the manifest", t)
			}
			continue
		}
		got, err := fileSHA256(p)
		switch {
		case err != nil:
			add("%s: %v", t, err)
		case got != want:
			add("%s: sha256 is %s, manifest says %s", t, got, want)
		}
	}

	if fi, err := os.Stat(filepath.Join(dir, toolEtcd)); err == nil && fi.Mode().IsRegular() {
		got, err := runVersion(ctx, filepath.Join(dir, toolEtcd))
		switch {
		case err != nil:
			add("%v", err)
		case got != v:
			add("etcd --version reports %s, want %s", got, v)
		}
	}
	return problems
}

// runVersion runs `bin --version` and returns the version it reports. The
// run is bounded by ctx and by versionTimeout; its environment is an etcd
// child's (childenv.Etcd: no ETCD_* variable, no secret).
func runVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	env := childenv.Etcd()
	var (
		out []byte
		err error
	)
	// A binary written a moment ago can briefly fail with ETXTBSY when
	// another goroutine forks while its write descriptor is open.
	for attempt := 1; ; attempt++ {
		cmd := exec.CommandContext(ctx, bin, "--version")
		cmd.Env = env
		out, err = cmd.CombinedOutput()
		if !errors.Is(err, syscall.ETXTBSY) || attempt == 5 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("run %s --version: %w", bin, ctx.Err())
	}
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), versionPrefix); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("run %s --version: no %q line in its output: %q", bin, versionPrefix, string(out))
}
