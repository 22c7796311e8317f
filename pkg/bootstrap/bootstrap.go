// Package bootstrap brings a Steward cluster up from its spec and takes it
// down: it writes a default spec when there is none, the certificates, starts
// the local agent, hands every agent its members and waits until they are
// healthy; down stops the members and the local agent (and orphans a dead
// agent left behind), keeping the data unless told to purge it.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/portcheck"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// UpOptions configure Up.
type UpOptions struct {
	// Members and Version shape a new spec; 0 and "" mean 3 and the
	// embedded version. They must not contradict an existing spec.
	Members int
	Version string
	// TLSOff writes a new spec with TLS disabled.
	TLSOff bool
	// BinaryStore is written into a new spec (empty: DIR/binaries).
	BinaryStore string
	// Address is the address a new spec's members listen on (empty:
	// 127.0.0.1): an IP address of this machine, such as another loopback
	// address (127.0.0.2) so that clusters on one machine never share a
	// port. For an existing spec it must be its local members' address.
	Address string
	// NoMetrics writes a new spec whose agent serves no Prometheus
	// metrics (by default it serves them on loopback: spec.NewDefault).
	// For an existing spec it must not contradict the spec's agent.
	NoMetrics bool
	// StewardBinary is the executable that runs the agent (default: this one).
	StewardBinary string
	// Timeout bounds the wait for a healthy cluster.
	Timeout time.Duration
}

// ErrNewClusterOnly refuses an UpOptions field that shapes a new spec
// (Members, Version, TLSOff, BinaryStore, Address) when it contradicts the spec the
// Steward directory already holds.
var ErrNewClusterOnly = errors.New("the option applies only to a new cluster")

// OptionError is ErrNewClusterOnly for one UpOptions field, named by
// Option; a command matches it (errors.As) to name its flag.
type OptionError struct {
	refusal.Refusal
	Option string
}

// ErrAddress refuses an UpOptions.Address that is not an IP address this
// machine can listen on.
var ErrAddress = errors.New("not an address this machine can listen on")

// checkAddress refuses an address members could not listen on, before
// anything is written: an IP literal (not a name, which could resolve
// elsewhere later) that this machine can bind now.
func checkAddress(a string) error {
	if a == "" {
		return nil
	}
	ip := net.ParseIP(a)
	if ip == nil {
		return fmt.Errorf("address %q: %w: give an IP address such as 127.0.0.2, not a name or a URL", a, ErrAddress)
	}
	if ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("address %s: %w: members need one address of their own, not %s", a, ErrAddress, map[bool]string{true: "the unspecified address", false: "a multicast address"}[ip.IsUnspecified()])
	}
	// Port 0 is never busy: only an address of no interface fails.
	if err := portcheck.Free(net.JoinHostPort(a, "0")); err != nil {
		return fmt.Errorf("address %s: %w (%v): give one of this machine's addresses (any 127.x.y.z is one on Linux)", a, ErrAddress, err)
	}
	return nil
}

func newClusterOnly(option, format string, args ...any) error {
	return &OptionError{Refusal: refusal.Refusal{Kind: ErrNewClusterOnly, Msg: fmt.Sprintf(format, args...)}, Option: option}
}

// AgentDownError: the agent of a member on another host does not answer;
// it is started on its host. Err is why the ping failed.
type AgentDownError struct {
	Member, Agent, Address string
	// JoinFile is the host's join file, for an agent on another host.
	JoinFile string
	Err      error
}

func (e *AgentDownError) Error() string {
	if e.JoinFile != "" {
		// Err names the host, its address and what was tried.
		return fmt.Sprintf("member %s: %v", e.Member, e.Err)
	}
	return fmt.Sprintf("member %s: agent %s does not answer at %s (%v): start it on its host", e.Member, e.Agent, e.Address, e.Err)
}

func (e *AgentDownError) Unwrap() error { return e.Err }

// Steps the progress lines of up, init and takeover name (progress.Hint):
// the command says which of its commands takes them.
const (
	// HintUp: the cluster brought up (its members started, the spec
	// handed to the hosts).
	HintUp progress.HintKind = "up"
	// HintRestartMember: a member stopped and started again (Args: its
	// name), which applies the spec's config.
	HintRestartMember progress.HintKind = "restart-member"
	// HintAddHost: a host added to the cluster.
	HintAddHost progress.HintKind = "add-host"
)

// Up starts the cluster of a Steward directory, writing a default spec
// first when there is none, and returns when every member is healthy.
func Up(ctx context.Context, dir string, o UpOptions, say progress.Func) (*cluster.Cluster, []string, error) {
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("steward dir: %w", err)
	}
	specPath := filepath.Join(dir, spec.FileName)
	if err := checkAddress(o.Address); err != nil {
		return nil, nil, err
	}
	var s *spec.Cluster
	if _, err := os.Stat(specPath); err == nil {
		s, err = spec.Load(specPath)
		if err != nil {
			return nil, nil, err
		}
		if err := (&cluster.Cluster{Dir: dir, Spec: s}).RequireProcessControl("start its members"); err != nil {
			return nil, nil, err
		}
		// Members of a restore stopped in its commit must not start: the
		// old ones would overwrite the restored (cluster.RestorePendingFile).
		if err := cluster.RequireNoRestorePending(dir, "start the members"); err != nil {
			return nil, nil, err
		}
		if o.Members != 0 && o.Members != len(s.Members) {
			return nil, nil, newClusterOnly("Members", "%s already describes %d members; the member count applies only to a new cluster", specPath, len(s.Members))
		}
		if o.Version != "" {
			if nv, err := binaries.NormalizeVersion(o.Version); err != nil || nv != s.Version {
				return nil, nil, newClusterOnly("Version", "%s already runs etcd %s; the version applies only to a new cluster", specPath, s.Version)
			}
		}
		if o.TLSOff != s.TLS.Disabled && o.TLSOff {
			return nil, nil, newClusterOnly("TLSOff", "%s has TLS on; turning it off applies only to a new cluster", specPath)
		}
		if a := s.LocalAddress(); o.Address != "" && a != o.Address {
			return nil, nil, newClusterOnly("Address", "%s has its members on %s; another address applies only to a new cluster", specPath, a)
		}
		if o.BinaryStore != "" && s.BinaryStoreDir(dir) != spec.Path(dir, o.BinaryStore) {
			return nil, nil, newClusterOnly("BinaryStore", "%s uses the binary store %s; another store applies only to a new cluster (edit binaryStore in the spec)", specPath, s.BinaryStoreDir(dir))
		}
		if a, ok := s.Agent(spec.LocalAgent); ok && o.NoMetrics && a.MetricsAddress != "" {
			return nil, nil, newClusterOnly("NoMetrics", "%s has the agent serve metrics at %s; turning them off applies only to a new cluster (remove metricsAddress from the spec)", specPath, a.MetricsAddress)
		}
	} else {
		if o.Members == 0 {
			o.Members = 3
		}
		v := o.Version
		if v == "" {
			v = binaries.EmbeddedVersion()
		}
		nv, err := binaries.NormalizeVersion(v)
		if err != nil {
			return nil, nil, err
		}
		host := o.Address
		if host == "" {
			host = spec.DefaultHost
		}
		s, err = spec.NewDefault(spec.DefaultOptions{
			Members: o.Members, Version: nv, StewardDir: dir, TLSOff: o.TLSOff,
			Host: host, FreePort: spec.FreePort(host), NoMetrics: o.NoMetrics,
		})
		if err != nil {
			return nil, nil, err
		}
		s.BinaryStore = o.BinaryStore
	}
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	warnings, err := c.ValidateSpec(s)
	if err != nil {
		return nil, warnings, err
	}
	// A backup.s3.caFile that does not verify the S3 server: refused
	// before anything is written or started.
	if w, err := c.CheckS3CA(ctx, s); err != nil {
		return nil, warnings, err
	} else if w != "" {
		warnings = append(warnings, w)
	}
	// A recovery mode a host's agent cannot do: refused before anything
	// is written or started, naming the host.
	if err := c.CheckAgentsCan(ctx, nil, s); err != nil {
		return nil, warnings, err
	}
	if _, err := os.Stat(specPath); errors.Is(err, os.ErrNotExist) {
		if err := s.Save(specPath); err != nil {
			return nil, warnings, err
		}
		say.Say("wrote %s (%d members, etcd %s)", specPath, len(s.Members), s.Version)
	}
	if err := c.EnsureCerts(); err != nil {
		return nil, warnings, err
	}

	// The local agent runs this machine's members; a cluster whose members
	// all live on other hosts needs none here.
	var local memberrt.Runtime
	startedAgent := false
	running := map[string]bool{}
	if s.Uses(spec.LocalAgent) {
		c.Progress = say
		startedAgent, err = EnsureLocalAgent(ctx, c, o.StewardBinary)
		if err != nil {
			return nil, warnings, err
		}
		if local, err = c.Runtime(spec.LocalAgent); err != nil {
			return nil, warnings, err
		}
		running = runningMembers(ctx, local)
	}
	// Check every port before starting anything: a busy port changes nothing.
	for _, m := range s.Members {
		if m.Agent != spec.LocalAgent || running[m.Name] {
			continue
		}
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			hp, _ := spec.HostPort(u)
			if err := waitPortFree(ctx, local, m.Name, hp); errors.Is(err, errMemberStarted) {
				break
			} else if err != nil {
				return nil, warnings, fmt.Errorf("member %s cannot start: %s: %w; pick another port in %s", m.Name, u, err, specPath)
			}
		}
	}
	if err := startMembers(ctx, c, local, startedAgent, running, say); err != nil {
		return nil, warnings, err
	}
	// The hosts' copies of the spec: their backup loops run from it.
	if err := c.PushSpec(ctx); err != nil {
		say.Say("warning: %v; continuous backups do not run on those hosts until the next %v", err, progress.Hint{Kind: HintUp, Plain: "start of the cluster"})
	}
	// Only the coordinator can sign the hosts' leaves (the CA key stays
	// here): with no agent on this machine, whose renewal loop would do it,
	// a renewal process of its own renews them at their renewal point.
	c.Progress = say
	if _, err := certs.EnsureRenewer(ctx, c, o.StewardBinary); err != nil {
		return nil, warnings, err
	}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st, err := status.WaitHealthy(wctx, c)
	if err != nil {
		return nil, warnings, err
	}
	// The cluster this spec runs: restore refuses backups of another.
	if st.Cluster.ID != "" {
		if err := c.RecordClusterID(st.Cluster.ID); err != nil {
			return nil, warnings, err
		}
	}
	if s.Backup.Continuous {
		// The agent's backup loop starts with the agent, before the
		// members answer; give it a moment to report that it records.
		bctx, bcancel := context.WithTimeout(ctx, 20*time.Second)
		defer bcancel()
		var cond status.Condition
		_ = cluster.Poll(bctx, 300*time.Millisecond, func(context.Context) (bool, error) {
			cond = status.BackupCondition(ctx, c, time.Now())
			return cond.Status == "True", nil
		})
		if cond.Status == "True" {
			say.Say("continuous backups on: %s", cond.Message)
		} else {
			say.Say("warning: continuous backups not running yet: %s: %s", cond.Reason, cond.Message)
		}
	}
	return c, warnings, nil
}

// startMembers hands every member of the spec to the runtime that runs
// it and starts it: this machine's members to local (startedAgent: its
// agent was started by this up, running: the members it reported running
// or starting before), every other agent's through cluster.Runtime once it
// answers (else an *AgentDownError). A member whose runtime reports its
// config pending is restarted on the spec's when the agent was just
// started (it started the member from its saved config), and left with a
// note otherwise.
func startMembers(ctx context.Context, c *cluster.Cluster, local memberrt.Runtime, startedAgent bool, running map[string]bool, say progress.Func) error {
	s := c.Spec
	for _, m := range s.Members {
		rt := local
		started := startedAgent
		if m.Agent != spec.LocalAgent {
			// Agents on other hosts are started there; up hands them
			// their members when they answer.
			other, err := c.Runtime(m.Agent)
			if err != nil {
				return err
			}
			if err := other.Ping(ctx, 5*time.Second); err != nil {
				a, _ := s.Agent(m.Agent)
				ad := &AgentDownError{Member: m.Name, Agent: m.Agent, Address: a.Endpoint(), Err: err}
				if a.Remote() {
					ad.JoinFile = JoinPath(c.Dir, m.Agent)
				}
				return ad
			}
			rt, started = other, false
		}
		ms, err := rt.PutMember(ctx, c.MemberConfig(m))
		if err != nil {
			return fmt.Errorf("configure member %s: %w", m.Name, err)
		}
		if ms.ConfigPending {
			if started {
				// The new agent started the member from its saved config a
				// moment ago; restart it on the spec's.
				if _, err := rt.Restart(ctx, m.Name); err != nil {
					return fmt.Errorf("restart member %s with the spec's config: %w", m.Name, err)
				}
			} else {
				say.Say("note: member %s runs with an older config; %v applies the spec", m.Name,
					progress.Hint{Kind: HintRestartMember, Args: []string{m.Name}, Plain: "stopping and starting it"})
			}
		}
		// Running before this up (not started a moment ago by the agent
		// this up started): Start leaves it as it is.
		wasRunning := !started && (running[m.Name] && m.Agent == spec.LocalAgent || ms.State == memberrt.StateRunning)
		if _, err := rt.Start(ctx, m.Name); err != nil {
			return fmt.Errorf("start member %s: %w", m.Name, err)
		}
		if wasRunning {
			say.Say("member %s was already running (%s)", m.Name, m.ClientURL)
		} else {
			say.Say("started member %s (%s)", m.Name, m.ClientURL)
		}
	}
	return nil
}

// runningMembers returns the members rt reports running or starting
// (their process is up or coming up); none when it does not answer.
func runningMembers(ctx context.Context, rt memberrt.Runtime) map[string]bool {
	running := map[string]bool{}
	ms, err := rt.Members(ctx)
	if err != nil {
		return running
	}
	for _, m := range ms {
		if m.State == memberrt.StateRunning || m.State == memberrt.StateStarting {
			running[m.Name] = true
		}
	}
	return running
}

// DownOptions configure Down.
type DownOptions struct {
	// Purge removes the Steward directory after everything stopped.
	Purge bool
}

// Down stops every member and the local agent. Data is kept unless Purge.
func Down(ctx context.Context, dir string, o DownOptions, say progress.Func) error {
	// Down works from whatever is there: an invalid or missing spec must
	// not keep the operator from stopping the processes.
	addr := "unix://" + agent.SocketPath(dir)
	if id, err := join.LoadIdentity(dir); err == nil {
		// A host of a multi-host cluster: its agent's own socket.
		addr = "unix://" + agent.SocketPathFor(dir, id.Agent)
	} else if s, err := spec.Load(filepath.Join(dir, spec.FileName)); err == nil {
		if a, ok := s.Agent(spec.LocalAgent); ok {
			addr = a.Address
		}
		if s.IsExternal() && !s.AllAdopted() {
			// Only this machine's agent (its backup loop and the members
			// adopted) stops; the other members are someone else's.
			say.Say("cluster %s is attached: its members that were not adopted keep running (Steward does not run them)", s.Name)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		say.Say("warning: %v; using the default agent socket", err)
	} else if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist: nothing to stop", dir)
	}
	if pid, err := cluster.ShutdownAgent(ctx, addr); err != nil {
		return err
	} else if pid != 0 {
		say.Say("stopping members and agent (pid %d)", pid)
		if err := waitExit(ctx, pid, 60*time.Second); err != nil {
			return err
		}
		say.Say("agent stopped")
	} else {
		say.Say("agent not running")
	}
	// Members left by an agent that died (kill -9) are stopped too.
	if err := stopOrphans(ctx, dir, say); err != nil {
		return err
	}
	if o.Purge {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("purge %s: %w", dir, err)
		}
		say.Say("removed %s", dir)
	}
	return nil
}

// stopOrphans stops member processes recorded in pid files whose agent is gone.
func stopOrphans(ctx context.Context, dir string, say progress.Func) error {
	ents, _ := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	for _, p := range ents {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || !proc.Alive(pid) {
			_ = os.Remove(p)
			continue
		}
		if !strings.Contains(strings.Join(proc.Cmdline(pid), " "), dir) {
			_ = os.Remove(p)
			continue
		}
		if filepath.Base(p) == certs.RenewerPIDFile {
			say.Say("stopping certificate renewal (pid %d)", pid)
		} else {
			say.Say("stopping orphaned process %d (%s)", pid, filepath.Base(p))
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		if waitExit(ctx, pid, 15*time.Second) != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if err := waitExit(ctx, pid, 5*time.Second); err != nil {
				return err
			}
		}
		_ = os.Remove(p)
	}
	return nil
}

func waitExit(ctx context.Context, pid int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := cluster.Poll(ctx, 100*time.Millisecond, func(context.Context) (bool, error) {
		return !proc.Alive(pid), nil
	})
	if err != nil {
		return fmt.Errorf("process %d did not exit within %s", pid, d)
	}
	return nil
}

// errMemberStarted: the local agent started the member whose port was
// busy (an agent starts the members it was running when it stopped).
var errMemberStarted = errors.New("the agent started the member")

// waitPortFree returns nil once hostPort is free, errMemberStarted when
// the local agent's runtime (rt; nil: none) reports the member starting or
// running meanwhile (its own process holds the port: an agent just started
// by up restarts the members it ran before, and says so only once it
// launched them), or the busy port's error after a few seconds (a process
// that is exiting releases its port by then; another program's does not).
func waitPortFree(ctx context.Context, rt memberrt.Runtime, member, hostPort string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := portcheck.Free(hostPort)
		if err == nil {
			return nil
		}
		if rt != nil && runningMembers(ctx, rt)[member] {
			return errMemberStarted
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}
