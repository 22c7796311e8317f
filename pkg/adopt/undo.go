package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Step kinds of an undo plan (kind adopt-undo), in order.
const (
	StepUndoLeader   = "adopt-undo-move-leader"
	StepUndoStop     = "adopt-undo-stop"
	StepUndoRecord   = "adopt-undo-record"
	StepUndoGiveBack = "adopt-undo-give-back"
)

// ErrNoAdoption: no adopt plan of the member to undo.
var ErrNoAdoption = errors.New("no adoption of the member to undo")

// NewUndoPlan builds the plan that gives member name back to how it ran
// before its adopt plan (not saved): the latest adopt plan of that member,
// done or stopped halfway. An adopt plan still active is marked aborted
// first (refused while a process runs it). It changes nothing else.
func NewUndoPlan(ctx context.Context, c *cluster.Cluster, name string, now time.Time) (*plan.Plan, error) {
	store := c.Plans()
	plans, err := store.List()
	if err != nil && !errors.Is(err, plan.ErrNoPlan) {
		return nil, err
	}
	var of *plan.Plan
	for _, p := range plans {
		if p.Kind == plan.KindAdopt && memberOf(p) == name && (of == nil || p.CreatedAt.After(of.CreatedAt)) {
			of = p
		}
	}
	if of == nil {
		return nil, refusal.New(ErrNoAdoption, "no adopt plan of member %s in %s: there is nothing to give back", name, c.Dir)
	}
	if of.State == plan.RolledBack {
		return nil, refusal.New(ErrNoAdoption, "the adoption of %s (plan %s) was undone already", name, of.ID)
	}
	if of.Active() {
		if store.Locked() {
			return nil, plan.ErrLocked
		}
		if _, err := plan.RequestAbort(ctx, store, of.ID); err != nil {
			return nil, err
		}
	}
	p := &plan.Plan{ID: plan.NewID(plan.KindAdoptUndo, now), Kind: plan.KindAdoptUndo, Of: of.ID, State: plan.Pending, CreatedAt: now.UTC()}
	if err := plan.SetPayload(p, Payload{Member: name}); err != nil {
		return nil, err
	}
	for k, v := range of.Values {
		p.SetValue(k, v)
	}
	add := func(kind, desc string) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: kind, Member: name, Description: desc, State: plan.Pending})
	}
	add(StepUndoLeader, "move leadership away from "+name+" if it leads")
	add(StepUndoStop, "stop "+name+" under its agent and forget it there (its data dir is kept)")
	add(StepUndoRecord, "record "+name+" in the spec as external again")
	var run MemberRun
	_ = json.Unmarshal([]byte(p.Value(ValueRun)), &run)
	back := "restart the old process of " + name + " with its recorded command line, environment and working directory"
	switch run.Source.Kind {
	case KindManifest:
		back = "move the static pod manifest back to " + run.Source.Path + " (the kubelet starts the member)"
	case KindUnit:
		back = "start the systemd unit " + p.Value(ValueUnit)
		if args := unitCommand(true, p.Value(ValueUnit), p.Value(ValueUnitFileState)); args != nil {
			back = "enable the systemd unit " + p.Value(ValueUnit) + " again (it was " + p.Value(ValueUnitFileState) + ") and start it"
		}
	}
	add(StepUndoGiveBack, back+", and wait until it is healthy")
	return p, nil
}

// Undo plans the undo of member name's adoption, saves the plan and runs
// it; the adopt plan it undoes is marked rolled back once it is done.
func Undo(ctx context.Context, c *cluster.Cluster, name string) (*plan.Plan, error) {
	store := c.Plans()
	if _, err := plan.Admit(store, admitUndo); err != nil {
		return nil, err
	}
	p, err := NewUndoPlan(ctx, c, name, time.Now())
	if err != nil {
		return nil, err
	}
	if err := store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, Run(ctx, c, p.ID)
}

// undo runs one step of an undo plan.
func (e *Executor) undo(ctx context.Context, p *plan.Plan, s *plan.Step, run MemberRun, m spec.Member) error {
	c := e.C
	switch s.Kind {
	case StepUndoLeader:
		if !m.IsAdopted() {
			return nil
		}
		return e.moveLeader(ctx, run.Name)
	case StepUndoStop:
		if m.Agent == "" {
			return nil
		}
		ac, err := c.RuntimeFor(m)
		if err != nil {
			return err
		}
		ms, err := ac.Members(ctx)
		if err != nil {
			return fmt.Errorf("members of agent %s: %w", m.Agent, err)
		}
		if !slices.ContainsFunc(ms, func(x memberrt.MemberStatus) bool { return x.Name == run.Name }) {
			return nil
		}
		if err := ac.DeleteMember(ctx, run.Name); err != nil {
			return fmt.Errorf("stop %s under agent %s: %w", run.Name, m.Agent, err)
		}
		c.Progress.Say("  %s stopped under agent %s (data dir %s kept)", run.Name, m.Agent, run.DataDir)
		return nil
	case StepUndoRecord:
		if m.Agent == "" && m.Adopted == nil {
			return nil
		}
		next := c.Spec.Clone()
		nm, _ := next.Member(run.Name)
		nm.Agent, nm.DataDir, nm.Adopted, nm.Version = "", "", nil, ""
		return c.SaveSpec(ctx, next)
	case StepUndoGiveBack:
		if err := e.giveBack(ctx, p, run); err != nil {
			return err
		}
		if err := e.waitHealthy(ctx, run.Name); err != nil {
			return err
		}
		return markUndone(ctx, c.Plans(), p.Of)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// giveBack moves a static pod's manifest back, starts a systemd unit again
// (enabled again when it was), or restarts the old process as it ran
// (detached: its own session, its output to DIR/adopted/NAME/etcd.log)
// unless a process runs the member already.
func (e *Executor) giveBack(ctx context.Context, p *plan.Plan, run MemberRun) error {
	c := e.C
	if run.Source.Kind == KindUnit {
		if err := switchUnit(ctx, c, true, p.Value(ValueUnit), p.Value(ValueUnitFileState)); err != nil {
			return fmt.Errorf("give %s back to systemd: %w", run.Name, err)
		}
		return nil
	}
	if run.Source.Kind == KindManifest {
		aside := p.Value(ValueManifestAside)
		if aside == "" {
			return nil // never moved
		}
		if _, err := os.Stat(aside); errors.Is(err, os.ErrNotExist) {
			return nil // moved back already
		}
		if _, err := os.Stat(run.Source.Path); err == nil {
			return fmt.Errorf("cannot move %s back to %s: a file is there already; compare and move it yourself", aside, run.Source.Path)
		}
		if err := os.Rename(aside, run.Source.Path); err != nil {
			return fmt.Errorf("move the static pod manifest back: %w", err)
		}
		c.Progress.Say("  moved %s back to %s", aside, run.Source.Path)
		return nil
	}
	if _, err := FindProcess(run.DataDir, run.Name); err == nil {
		return nil // running already
	}
	var args, env []string
	if err := json.Unmarshal([]byte(p.Value(ValueCmdline)), &args); err != nil || len(args) == 0 {
		return fmt.Errorf("the adopt plan %s recorded no command line of %s to restart it with: start it yourself", p.Of, run.Name)
	}
	if err := json.Unmarshal([]byte(p.Value(ValueEnv)), &env); err != nil {
		return fmt.Errorf("the environment of %s the adopt plan %s recorded: %w", run.Name, p.Of, err)
	}
	logDir := filepath.Join(c.Dir, "adopted", run.Name)
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(logDir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = env, p.Value(ValueCwd)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart the old process of %s: %w", run.Name, err)
	}
	c.Progress.Say("  restarted %s as it ran before (pid %d, output in %s)", run.Name, cmd.Process.Pid, logf.Name())
	return cmd.Process.Release()
}

// waitHealthy waits until every member, name included, is healthy.
func (e *Executor) waitHealthy(ctx context.Context, name string) error {
	wait := e.HealthTimeout
	if wait <= 0 {
		wait = defaultWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := ""
	err := cluster.Poll(wctx, pollInterval, func(ctx context.Context) (bool, error) {
		err := healthy(ctx, e.C)
		if err != nil {
			last = err.Error()
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("health gate after giving %s back: waited %s: %s", name, wait, last)
	}
	return nil
}

// markUndone marks the adopt plan an undo plan gave back rolled back.
func markUndone(ctx context.Context, store *plan.Store, id string) error {
	if id == "" {
		return nil
	}
	p, err := store.Get(id)
	if err != nil {
		return err
	}
	if p.State == plan.RolledBack {
		return nil
	}
	p.State = plan.RolledBack
	return store.Save(ctx, p)
}
