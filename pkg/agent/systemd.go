package agent

import (
	"fmt"
	"path/filepath"
	"strings"
)

// UnitOptions shape the systemd unit `steward agent install` writes.
type UnitOptions struct {
	// Binary is the absolute path of the steward executable.
	Binary string
	// Dir is the agent's absolute Steward directory.
	Dir string
	// User runs the agent (and so its members); default root.
	User string
	// Args are further `steward agent` flags (for example --binary-store).
	Args []string
}

// SystemdUnit renders the agent's unit. The agent runs in the foreground
// (Type=simple) and is restarted whatever ends it. KillMode=process: on a
// stop systemd signals only the agent, which stops its members gracefully
// itself; when the agent alone dies, its members keep serving and the
// restarted agent adopts them.
func SystemdUnit(o UnitOptions) (string, error) {
	if !filepath.IsAbs(o.Binary) || !filepath.IsAbs(o.Dir) {
		return "", fmt.Errorf("systemd unit: the binary (%s) and the directory (%s) must be absolute paths", o.Binary, o.Dir)
	}
	if o.User == "" {
		o.User = "root"
	}
	args := append([]string{quote(o.Binary), "agent", "--dir", quote(o.Dir)}, quoteAll(o.Args)...)
	return fmt.Sprintf(`# Written by steward agent install. See docs/agent.md.
[Unit]
Description=Steward agent: the etcd members of this host
Documentation=https://github.com/etcd-steward/steward/blob/main/docs/agent.md
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User=%s
ExecStart=%s
Restart=always
RestartSec=2
KillMode=process
TimeoutStopSec=90
LimitNOFILE=65536
UMask=0077

[Install]
WantedBy=multi-user.target
`, o.User, strings.Join(args, " ")), nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = quote(s)
	}
	return out
}

// quote quotes an ExecStart word for systemd when it needs it.
func quote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\$%;") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `$$`, `%`, `%%`)
	return `"` + r.Replace(s) + `"`
}
