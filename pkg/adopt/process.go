package adopt

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// FromProcess reads a running etcd process: /proc/PID/cmdline, environ
// (its ETCD_* variables; reading another user's needs root), cwd (for
// relative paths and a relative config file) and the version of the
// program it runs (/proc/PID/exe --version).
func FromProcess(ctx context.Context, pid int) (MemberRun, error) {
	r, err := readProcess(pid)
	if err != nil {
		return MemberRun{}, err
	}
	if v, err := BinaryVersion(ctx, "/proc/"+strconv.Itoa(pid)+"/exe"); err == nil {
		r.Version = v
	}
	return r, nil
}

// readProcess is FromProcess without the binary's version.
func readProcess(pid int) (MemberRun, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	args := proc.Cmdline(pid)
	if args == nil || !proc.Alive(pid) {
		return MemberRun{}, refusal.New(ErrSource, "no process %d", pid)
	}
	if !isEtcd(args) {
		return MemberRun{}, refusal.New(ErrSource, "process %d runs %s, not etcd", pid, args[0])
	}
	environ, err := os.ReadFile(dir + "/environ")
	if err != nil {
		return MemberRun{}, refusal.New(ErrSource, "read the environment of process %d (run as its user or root): %v", pid, err)
	}
	cwd, err := os.Readlink(dir + "/cwd")
	if err != nil {
		return MemberRun{}, refusal.New(ErrSource, "read the working directory of process %d: %v", pid, err)
	}
	r, err := ParseProcess(args, splitNUL(environ), cwd, pid, os.ReadFile)
	if err != nil {
		return MemberRun{}, err
	}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		r.Binary = strings.TrimSuffix(exe, " (deleted)")
	}
	return r, nil
}

// ParseProcess builds a MemberRun from a process' arguments (program
// first), environment (KEY=VALUE) and working directory; readFile reads
// an etcd config file the process names.
func ParseProcess(args, env []string, cwd string, pid int, readFile func(string) ([]byte, error)) (MemberRun, error) {
	if len(args) == 0 {
		return MemberRun{}, refusal.New(ErrSource, "process %d has no command line", pid)
	}
	readConfig := func(p string) ([]byte, error) {
		if readFile == nil {
			return nil, os.ErrNotExist
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return readFile(p)
	}
	r, err := build(args[1:], env, readConfig, nil, cwd, Source{Kind: KindProcess, PID: pid})
	if err != nil {
		return MemberRun{}, err
	}
	if r.Source.ConfigFile != "" && !filepath.IsAbs(r.Source.ConfigFile) {
		r.Source.ConfigFile = filepath.Join(cwd, r.Source.ConfigFile)
	}
	r.Binary = args[0]
	return r, nil
}

// FindProcess returns the pid of the one running etcd process whose
// member has the given data dir (when dataDir is set) and name (when name
// is set), read the way FromProcess reads it.
func FindProcess(dataDir, name string) (int, error) {
	var found []int
	for _, pid := range proc.Find(isEtcd) {
		r, err := readProcess(pid)
		if err != nil {
			continue
		}
		if dataDir != "" && r.DataDir != filepath.Clean(dataDir) || name != "" && r.Name != name {
			continue
		}
		found = append(found, pid)
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, refusal.New(ErrSource, "no etcd process runs with data dir %q and name %q", dataDir, name)
	}
	return 0, refusal.New(ErrSource, "%d etcd processes run with data dir %q and name %q: give the pid", len(found), dataDir, name)
}

// isEtcd reports whether a command line runs etcd.
func isEtcd(args []string) bool { return len(args) > 0 && filepath.Base(args[0]) == "etcd" }

func splitNUL(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}
