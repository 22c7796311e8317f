package adopt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// Values an adopt plan of a member run by a systemd unit records.
const (
	// ValueUnit is the unit's name (etcd.service).
	ValueUnit = "unit"
	// ValueUnitFileState is the unit's enablement when it was adopted
	// (systemctl's UnitFileState: enabled, enabled-runtime, disabled,
	// static, ...): undo restores it.
	ValueUnitFileState = "unitFileState"
)

// ErrSystemd: systemd does not run the unit as given (not reachable, not
// loaded from that file, not active).
var ErrSystemd = errors.New("systemd does not run the unit as given")

// systemctlWait bounds one systemctl call: stop waits for etcd's graceful
// stop (up to its TimeoutStopSec), start for its readiness notification.
const systemctlWait = 3 * time.Minute

// UnitState is what systemd reports of a unit (`systemctl show`).
type UnitState struct {
	LoadState     string
	ActiveState   string
	UnitFileState string
	FragmentPath  string
}

// systemctl runs systemctl (found on PATH) with args against the system
// manager; its output is in the error when it fails.
func systemctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, systemctlWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "systemctl", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// ShowUnit asks systemd for the state of unit name.
func ShowUnit(ctx context.Context, name string) (UnitState, error) {
	out, err := systemctl(ctx, "show", name, "--property=LoadState,ActiveState,UnitFileState,FragmentPath")
	if err != nil {
		return UnitState{}, err
	}
	return parseShow(out), nil
}

// parseShow reads `systemctl show` output (KEY=VALUE lines).
func parseShow(out string) UnitState {
	var s UnitState
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		switch k {
		case "LoadState":
			s.LoadState = v
		case "ActiveState":
			s.ActiveState = v
		case "UnitFileState":
			s.UnitFileState = v
		case "FragmentPath":
			s.FragmentPath = v
		}
	}
	return s
}

// UnitName is the name systemd knows the unit file p by.
func UnitName(p string) string { return filepath.Base(p) }

// checkUnit refuses unless systemd runs the unit file p: reachable, the
// unit loaded from p (not another file of that name), active. It returns
// the unit's state.
func checkUnit(ctx context.Context, p string) (UnitState, error) {
	name := UnitName(p)
	if !strings.HasSuffix(name, ".service") {
		return UnitState{}, refusal.New(ErrSystemd, "%s is not a service unit (a NAME.service file): give the unit file systemd runs the member from", p)
	}
	st, err := ShowUnit(ctx, name)
	if err != nil {
		return UnitState{}, refusal.New(ErrSystemd, "ask systemd about %s (run adopt --unit on the member's host, as root, with systemd running): %v", name, err)
	}
	if st.LoadState != "loaded" {
		return st, refusal.New(ErrSystemd, "systemd has not loaded %s (load state %q): give the unit file systemd runs the member from", name, st.LoadState)
	}
	if !samePath(st.FragmentPath, p) {
		return st, refusal.New(ErrSystemd, "systemd runs %s from %s, not from %s: adopt --unit %s", name, st.FragmentPath, p, st.FragmentPath)
	}
	if st.ActiveState != "active" {
		return st, refusal.New(ErrSystemd, "%s is %s, not active: adopt only a member its unit runs (`systemctl start %s` first)", name, st.ActiveState, name)
	}
	return st, nil
}

// samePath reports whether a and b name the same file (symbolic links
// followed).
func samePath(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

// runtimeFlag is the systemctl flag enabling or disabling a unit the way
// it was enabled: "--runtime" for enabled-runtime (a link under /run),
// none for enabled. ok is false for any other state (static, disabled,
// linked, ...), which enable and disable leave alone.
func runtimeFlag(unitFileState string) (flag string, ok bool) {
	switch unitFileState {
	case "enabled":
		return "", true
	case "enabled-runtime":
		return "--runtime", true
	}
	return "", false
}

// unitCommand is the systemctl command line that enables (on true) or
// disables the unit as its recorded state says, nil when there is
// nothing to do.
func unitCommand(enable bool, name, unitFileState string) []string {
	flag, ok := runtimeFlag(unitFileState)
	if !ok {
		return nil
	}
	verb := "disable"
	if enable {
		verb = "enable"
	}
	args := []string{verb}
	if flag != "" {
		args = append(args, flag)
	}
	return append(args, name)
}

// switchUnit hands the unit back (on) or takes it from systemd: on, it is
// enabled again when it was enabled and started (for Type=notify,
// systemctl returns once etcd said it is ready); off, it is disabled when
// it was enabled (so that no boot or dependency starts it again beside
// the agent's member) and stopped, its file kept for undo. Every call is a
// no-op when done already.
func switchUnit(ctx context.Context, c *cluster.Cluster, on bool, name, unitFileState string) error {
	args := unitCommand(on, name, unitFileState)
	if args != nil {
		if _, err := systemctl(ctx, args...); err != nil {
			return err
		}
	}
	verb := "stop"
	if on {
		verb = "start"
	}
	if _, err := systemctl(ctx, verb, name); err != nil {
		return err
	}
	switch {
	case on && args != nil:
		c.Progress.Say("  systemd unit %s enabled again and started", name)
	case on:
		c.Progress.Say("  systemd unit %s started", name)
	case args != nil:
		c.Progress.Say("  systemd unit %s disabled and stopped (its file kept for undo)", name)
	default:
		c.Progress.Say("  systemd unit %s stopped (its file kept for undo)", name)
	}
	return nil
}
