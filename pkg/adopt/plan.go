package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// Step kinds of an adopt plan, in order.
const (
	StepCheck  = "adopt-check"
	StepLeader = "adopt-move-leader"
	StepStop   = "adopt-stop-old"
	StepRecord = "adopt-record"
	StepStart  = "adopt-start"
)

// Values an adopt plan records for its steps and for undo.
const (
	// ValueRun is the MemberRun discovered, as JSON.
	ValueRun = "run"
	// ValuePID is the old process' pid, when it was given or found.
	ValuePID = "pid"
	// ValueCmdline and ValueEnv are the old process' argv and environment
	// (JSON lists; of the environment only what etcd reads: ETCD_* and
	// childenv's base names), ValueCwd its working directory: how undo
	// restarts it.
	ValueCmdline = "cmdline"
	ValueEnv     = "env"
	ValueCwd     = "cwd"
	// ValueManifestAside is where a static pod's manifest was moved.
	ValueManifestAside = "manifestAside"
)

const (
	defaultWait  = 2 * time.Minute
	stopWait     = time.Minute
	pollInterval = 500 * time.Millisecond
)

// Refusals of an adopt plan (each a *refusal.Refusal; the command says
// what to do about ErrAdopted, ErrNoAgent and ErrNoBinary).
var (
	// ErrUnhealthy: a member of the cluster is unhealthy.
	ErrUnhealthy = errors.New("a member of the cluster is unhealthy")
	// ErrNoAgent: the spec has no agent on this machine to run the member.
	ErrNoAgent = errors.New("no agent on this machine in the spec")
	// ErrAdopted: the member is adopted already.
	ErrAdopted = errors.New("the member is adopted already")
	// ErrNoBinary: the binary store lacks the etcd version the member
	// runs, which its agent would start it with.
	ErrNoBinary = errors.New("the member's etcd version is not in the binary store")
)

// NewPlan checks that the member run describes can be handed to this
// machine's agent and builds the adopt plan (not saved). It changes
// nothing. pid is the old process when known (--pid), else it is found by
// data dir and name.
func NewPlan(ctx context.Context, c *cluster.Cluster, run MemberRun, now time.Time) (*plan.Plan, error) {
	s := c.Spec
	if !s.IsExternal() {
		return nil, refusal.New(ErrNotAttached, "cluster %s is not attached: Steward runs its members already", s.Name)
	}
	m, ok := s.Member(run.Name)
	if !ok {
		return nil, refusal.New(ErrNotThisMember, "cluster %s has no member %s (members: %v)", s.Name, run.Name, s.MemberNames())
	}
	if m.IsAdopted() {
		return nil, refusal.New(ErrAdopted, "member %s is adopted already (agent %s)", m.Name, m.Agent)
	}
	if a, ok := s.Agent(spec.LocalAgent); !ok || a.Remote() {
		return nil, refusal.New(ErrNoAgent, "cluster %s has no agent on this machine to run member %s", s.Name, run.Name)
	}
	if err := Check(run); err != nil {
		return nil, err
	}
	cfg, err := run.MemberConfig()
	if err != nil {
		return nil, err
	}
	// The agent starts the member from the store, with the version it runs
	// today: checked here, since the record step (a spec naming that
	// version) comes after the old process is stopped.
	version := cfg.Version
	if version == "" {
		version = s.Version
	}
	if _, err := binaries.Open(s.BinaryStoreDir(c.Dir)).Resolve(version); err != nil {
		return nil, causedRefusal{refusal.New(ErrNoBinary, "member %s runs etcd %s, which its agent would start it with, but %v", run.Name, version, err), err}
	}
	if err := healthy(ctx, c); err != nil {
		return nil, err
	}
	if _, err := CheckAttached(ctx, c, run); err != nil {
		return nil, err
	}
	var unit UnitState
	if run.Source.Kind == KindUnit {
		if unit, err = checkUnit(ctx, run.Source.Path); err != nil {
			return nil, err
		}
	}
	p := &plan.Plan{ID: plan.NewID(plan.KindAdopt, now), Kind: plan.KindAdopt, State: plan.Pending, CreatedAt: now.UTC()}
	if err := plan.SetPayload(p, Payload{Member: run.Name}); err != nil {
		return nil, err
	}
	b, err := json.Marshal(run)
	if err != nil {
		return nil, err
	}
	p.SetValue(ValueRun, string(b))
	if run.Source.Kind == KindUnit {
		p.SetValue(ValueUnit, UnitName(run.Source.Path))
		p.SetValue(ValueUnitFileState, unit.UnitFileState)
	}
	pid := run.Source.PID
	if pid == 0 {
		if pid, err = FindProcess(run.DataDir, run.Name); err != nil && run.Source.Kind != KindManifest {
			return nil, err
		}
	}
	if pid != 0 {
		p.SetValue(ValuePID, strconv.Itoa(pid))
		if err := recordProcess(p, pid); err != nil {
			return nil, err
		}
	}
	add := func(kind, desc string) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: kind, Member: run.Name, Description: desc, State: plan.Pending})
	}
	add(StepCheck, "check that every member is healthy and the data dir holds "+run.Name)
	add(StepLeader, "move leadership away from "+run.Name+" if it leads")
	old := "stop the old process of " + run.Name + " (SIGTERM) and wait until it exited"
	switch run.Source.Kind {
	case KindManifest:
		old = "move the static pod manifest " + run.Source.Path + " aside (kept for undo), then " + old
	case KindUnit:
		old = "stop the systemd unit " + UnitName(run.Source.Path) + " (systemctl stop)"
		if args := unitCommand(false, UnitName(run.Source.Path), unit.UnitFileState); args != nil {
			old = "disable the systemd unit " + UnitName(run.Source.Path) + " (it was " + unit.UnitFileState + ") and stop it"
		}
		old += ", and wait until its process exited"
	}
	add(StepStop, old)
	add(StepRecord, "record "+run.Name+" in the spec as run by agent "+spec.LocalAgent+", with its data dir, URLs and certificates")
	add(StepStart, "start "+run.Name+" under agent "+spec.LocalAgent+" and wait until it is healthy and caught up")
	return p, nil
}

// recordProcess keeps how the old process ran (argv, environment, working
// directory) for undo.
func recordProcess(p *plan.Plan, pid int) error {
	args := proc.Cmdline(pid)
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return refusal.New(ErrSource, "read the environment of process %d (run as its user or root): %v", pid, err)
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return refusal.New(ErrSource, "read the working directory of process %d: %v", pid, err)
	}
	a, _ := json.Marshal(args)
	e, _ := json.Marshal(childenv.OfEtcd(splitNUL(env)))
	p.SetValue(ValueCmdline, string(a))
	p.SetValue(ValueEnv, string(e))
	p.SetValue(ValueCwd, cwd)
	return nil
}

// Apply builds the adopt plan of the member, saves it and runs it. It
// refuses while another plan is active.
func Apply(ctx context.Context, c *cluster.Cluster, run MemberRun) (*plan.Plan, error) {
	store := c.Plans()
	if _, err := plan.Admit(store, admitAdopt); err != nil {
		return nil, err
	}
	p, err := NewPlan(ctx, c, run, time.Now())
	if err != nil {
		return nil, err
	}
	if err := store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, Run(ctx, c, p.ID)
}

// Run runs the adopt plan id from its first step that is not done.
func Run(ctx context.Context, c *cluster.Cluster, id string) error {
	return plan.Run(ctx, c.Plans(), id, &Executor{C: c}, c.Progress)
}

// Executor runs the steps of an adopt plan. Every step is idempotent.
type Executor struct {
	C *cluster.Cluster
	// HealthTimeout bounds the wait for the adopted member (default 2
	// minutes, or the plan's HealthTimeoutSeconds).
	HealthTimeout time.Duration
}

// Execute implements plan.Executor.
func (e *Executor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	c, wait, err := e.C.ForStep(p, e.HealthTimeout)
	if err != nil {
		return err
	}
	e.C, e.HealthTimeout = c, wait
	var run MemberRun
	if err := json.Unmarshal([]byte(p.Value(ValueRun)), &run); err != nil {
		return fmt.Errorf("adopt plan %s: the member it records: %w", p.ID, err)
	}
	m, err := c.Member(run.Name)
	if err != nil {
		return err
	}
	if p.Kind == plan.KindAdoptUndo {
		return e.undo(ctx, p, s, run, m)
	}
	adopted := m.IsAdopted()
	switch s.Kind {
	case StepCheck:
		if adopted {
			return nil
		}
		if err := healthy(ctx, c); err != nil {
			return err
		}
		_, err := CheckAttached(ctx, c, run)
		return err
	case StepLeader:
		if adopted {
			return nil
		}
		return e.moveLeader(ctx, run.Name)
	case StepStop:
		if adopted {
			return nil
		}
		return e.stopOld(ctx, p, run)
	case StepRecord:
		return e.record(ctx, run)
	case StepStart:
		return e.start(ctx, run.Name)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// healthy refuses while any member of the cluster is unhealthy.
func healthy(ctx context.Context, c *cluster.Cluster) error {
	st, err := status.Get(ctx, c)
	if err != nil {
		return fmt.Errorf("status of cluster %s: %w", c.Spec.Name, err)
	}
	return allHealthy(c, st)
}

// allHealthy is healthy's gate on a status at hand.
func allHealthy(c *cluster.Cluster, st *status.Status) error {
	if st.Cluster.HealthyMembers < len(st.Members) {
		return refusal.New(ErrUnhealthy, "not every member of cluster %s is healthy (%s): adopt one only while all are", c.Spec.Name, st.Unhealthy())
	}
	return nil
}

// moveLeader moves leadership away from member name when it leads, to the
// member the one rule picks (rolling.Transferee; nothing pending: the
// plan acts on this member alone).
func (e *Executor) moveLeader(ctx context.Context, name string) error {
	c := e.C
	st, err := status.Get(ctx, c)
	if err != nil {
		return err
	}
	return rolling.MoveAway(ctx, rolling.Of(c), st, name, nil, c.Progress)
}

// stopOld moves a static pod's manifest aside (the kubelet would restart
// the member otherwise), then stops the old process and waits until it
// exited. A process that is gone already, or that no longer runs etcd
// with the member's data dir, counts as stopped.
func (e *Executor) stopOld(ctx context.Context, p *plan.Plan, run MemberRun) error {
	c := e.C
	if run.Source.Kind == KindManifest {
		aside := p.Value(ValueManifestAside)
		if aside == "" {
			aside = filepath.Join(c.Dir, "adopted", run.Name, filepath.Base(run.Source.Path))
			p.SetValue(ValueManifestAside, aside)
		}
		if _, err := os.Stat(run.Source.Path); err == nil {
			if err := os.MkdirAll(filepath.Dir(aside), 0o700); err != nil {
				return err
			}
			if err := os.Rename(run.Source.Path, aside); err != nil {
				return fmt.Errorf("move the static pod manifest aside: %w", err)
			}
			c.Progress.Say("  moved %s to %s (kept for undo)", run.Source.Path, aside)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if run.Source.Kind == KindUnit {
		// systemd would restart a member killed under it (Restart=):
		// the unit is stopped through systemd; a process it left is
		// stopped below.
		if err := switchUnit(ctx, c, false, p.Value(ValueUnit), p.Value(ValueUnitFileState)); err != nil {
			return fmt.Errorf("stop the systemd unit of %s: %w", run.Name, err)
		}
	}
	pid, _ := strconv.Atoi(p.Value(ValuePID))
	if pid == 0 {
		found, err := FindProcess(run.DataDir, run.Name)
		if err != nil {
			return nil // nothing runs the member any more
		}
		pid = found
	}
	if !runsMember(pid, run) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop the old process %d of %s: %w", pid, run.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	if err := cluster.Poll(wctx, 100*time.Millisecond, func(context.Context) (bool, error) {
		return !runsMember(pid, run), nil
	}); err != nil {
		return fmt.Errorf("the old process %d of %s did not exit within %s after SIGTERM", pid, run.Name, stopWait)
	}
	c.Progress.Say("  old process %d of %s exited", pid, run.Name)
	return nil
}

// runsMember reports whether pid is alive and runs etcd with the member's
// data dir (a pid reused by another program is not the member).
func runsMember(pid int, run MemberRun) bool {
	if !proc.Alive(pid) {
		return false
	}
	args := proc.Cmdline(pid)
	if !isEtcd(args) {
		return false
	}
	r, err := readProcess(pid)
	return err == nil && r.DataDir == run.DataDir && r.Name == run.Name
}

// record writes the member into the spec as run by this machine's agent,
// with the configuration it ran with.
func (e *Executor) record(ctx context.Context, run MemberRun) error {
	c := e.C
	cfg, err := run.MemberConfig()
	if err != nil {
		return err
	}
	next := c.Spec.Clone()
	m, ok := next.Member(run.Name)
	if !ok {
		return fmt.Errorf("member %s is no longer in the spec", run.Name)
	}
	m.Agent, m.DataDir = spec.LocalAgent, run.DataDir
	m.ClientURL, m.PeerURL = cfg.ClientURL, cfg.PeerURL
	m.Version = ""
	if cfg.Version != "" && cfg.Version != next.Version {
		m.Version = cfg.Version
	}
	a := &spec.Adopted{
		InitialCluster: cfg.InitialCluster, InitialClusterToken: cfg.InitialClusterToken,
		QuotaBackendBytes: cfg.QuotaBackendBytes, SnapshotCount: cfg.SnapshotCount,
		AutoCompactionMode: cfg.AutoCompactionMode, AutoCompactionRetention: cfg.AutoCompactionRetention,
		HeartbeatIntervalMs: cfg.HeartbeatIntervalMs, ElectionTimeoutMs: cfg.ElectionTimeoutMs,
		ExtraFlags: cfg.ExtraFlags,
	}
	if t := cfg.TLS; t != nil {
		a.TLS = &spec.AdoptedTLS{CA: t.CA, ServerCert: t.ServerCert, ServerKey: t.ServerKey, PeerCert: t.PeerCert, PeerKey: t.PeerKey,
			PeerAllowedCN: t.PeerAllowedCN}
	}
	m.Adopted = a
	return c.SaveSpec(ctx, next)
}

// start hands the member to its agent and waits until it is healthy and
// has applied what the leader had when it came back.
func (e *Executor) start(ctx context.Context, name string) error {
	c := e.C
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		return fmt.Errorf("configure member %s on agent %s: %w", name, m.Agent, err)
	}
	if _, err := ac.Start(ctx, name); err != nil {
		return fmt.Errorf("start member %s: %w", name, err)
	}
	wait := e.HealthTimeout
	if wait <= 0 {
		wait = defaultWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := status.WaitCaughtUp(wctx, c, name, 0, pollInterval); err != nil {
		return fmt.Errorf("health gate after starting %s under agent %s: waited %s: %w", name, m.Agent, wait, err)
	}
	c.Progress.Say("  %s runs under agent %s, healthy and caught up", name, m.Agent)
	return nil
}

// causedRefusal is a refusal whose message names another error, cause,
// which it also wraps: the store's problem (binaries.ProblemOf) for the
// command to advise inside the message.
type causedRefusal struct {
	error // the *refusal.Refusal
	cause error
}

func (e causedRefusal) Unwrap() []error { return []error{e.error, e.cause} }
