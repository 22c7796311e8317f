package adopt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
)

// build merges a member's arguments, environment and config file into a
// MemberRun.
func build(args, env []string, readConfig func(string) ([]byte, error), hostPath func(string) string, cwd string, src Source) (MemberRun, error) {
	flags, ignored, configFile, err := effective(args, env, readConfig)
	if err != nil {
		return MemberRun{}, err
	}
	r, err := newRun(flags, hostPath, cwd)
	if err != nil {
		return MemberRun{}, err
	}
	r.Ignored = ignored
	src.ConfigFile = configFile
	r.Source = src
	return r, nil
}

var versionLine = regexp.MustCompile(`(?m)^etcd Version: (\S+)$`)

// BinaryVersion runs `BINARY --version` (with the environment of an etcd
// tool: no ETCD_* variable) and returns the version it prints.
func BinaryVersion(ctx context.Context, binary string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	cmd.Env = childenv.Etcd()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", binary, err)
	}
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version printed no etcd version", binary)
	}
	return string(m[1]), nil
}

// parseEnvFile reads KEY=VALUE lines (a systemd EnvironmentFile, the
// format of /etc/default/etcd): blank lines and lines starting with # or ;
// are skipped, an optional "export " is dropped, a value may be quoted.
func parseEnvFile(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		out = append(out, k+"="+v)
	}
	return out
}
