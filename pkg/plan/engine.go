package plan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/progress"
)

// Executor performs steps. Execute must be idempotent: it is called again
// for a step that completed but was not recorded as done, and for one that
// died halfway.
type Executor interface {
	Execute(ctx context.Context, p *Plan, s *Step) error
}

// ErrAborted is returned by Run when an abort request stopped the plan.
var ErrAborted = errors.New("plan aborted")

// StepError is the error Run returns when a step fails: it says which step
// of which plan failed and wraps the step's error. Its message is the
// plan's recorded Error; what the operator does next is the caller's to say.
type StepError struct {
	// Plan is the plan's ID.
	Plan        string
	Index       int
	Description string
	// Err is the error the step's Executor returned.
	Err error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s) failed: %v", e.Index+1, e.Description, e.Err)
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }

// Run runs the plan with the given ID from its first step that is not done,
// under the runner's lock. say, when not nil, hears about each step.
// A failed step makes Run return a *StepError.
//
// Each step passes two crash points (internal/crashpoint):
// plan-step-before:N once it is recorded running, before it acts, and
// plan-step-after:N once it acted without error, before it is recorded done.
func Run(ctx context.Context, st *Store, id string, ex Executor, say progress.Func) error {
	return RunAmended(ctx, st, id, ex, nil, say)
}

// RunAmended is Run with amend (if not nil) called, under the runner's
// lock, on a plan about to run (not done, aborted or rolled back) before
// any step: a kind whose steps changed since the plan was written brings
// a plan an older Steward saved up to date (adds the steps it lacks,
// pending), returning true when it changed the plan, which is then saved
// before its first step that is not done runs. It must not touch steps
// already done, and must be idempotent (a resume after a kill amends the
// plan it amended, on disk, again).
func RunAmended(ctx context.Context, st *Store, id string, ex Executor, amend func(*Plan) bool, say progress.Func) error {
	lock, err := st.TryLock()
	if err != nil {
		return err
	}
	defer lock.Release()
	// Before the first step and after the last (done, failed, aborted):
	// see StepScratchPrefix.
	st.sweepStepScratch(say)
	defer st.sweepStepScratch(say)
	p, err := st.Get(id)
	if err != nil {
		return err
	}
	switch p.State {
	case Done:
		say.Say("plan %s is already done", p.ID)
		return nil
	case Aborted, RolledBack:
		return fmt.Errorf("plan %s is %s: start a new plan instead", p.ID, p.State)
	}
	if amend != nil && amend(p) {
		say.Say("plan %s brought up to date: %d steps", p.ID, len(p.Steps))
	}
	p.State, p.Error = Running, ""
	if err := st.Save(ctx, p); err != nil {
		return err
	}
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.State == Done {
			continue
		}
		// An abort requested by another process reaches p through Save.
		if p.AbortRequested {
			p.State = Aborted
			say.Say("plan %s aborted before step %d", p.ID, s.Number())
			if err := st.Save(ctx, p); err != nil {
				return err
			}
			return ErrAborted
		}
		now := time.Now().UTC()
		s.State, s.Error, s.StartedAt, s.EndedAt = Running, "", &now, nil
		s.Attempts++
		if err := st.Save(ctx, p); err != nil { // on disk before the step acts
			return err
		}
		// Counted from 1 ("step 1/6" ... "6/6"), as the table shows them.
		say.Say("step %d/%d: %s", s.Number(), len(p.Steps), s.Description)
		crashpoint.Hit(crashpoint.Indexed(crashpoint.PlanStepBefore, s.Index))
		err := ex.Execute(ctx, p, s)
		end := time.Now().UTC()
		s.EndedAt = &end
		if err != nil {
			stepErr := &StepError{Plan: p.ID, Index: s.Index, Description: s.Description, Err: err}
			s.State, s.Error = Failed, err.Error()
			p.State, p.Error = Failed, stepErr.Error()
			if saveErr := st.Save(ctx, p); saveErr != nil {
				return errors.Join(stepErr, saveErr)
			}
			return stepErr
		}
		crashpoint.Hit(crashpoint.Indexed(crashpoint.PlanStepAfter, s.Index))
		s.State = Done
		if err := st.Save(ctx, p); err != nil {
			return err
		}
	}
	p.State = Done
	say.Say("plan %s done", p.ID)
	return st.Save(ctx, p)
}

// RequestAbort marks the plan so the engine stops before its next step.
// A plan that no process runs is marked aborted at once.
func RequestAbort(ctx context.Context, st *Store, id string) (*Plan, error) {
	p, err := st.Get(id)
	if err != nil {
		return nil, err
	}
	if !p.Active() {
		return p, fmt.Errorf("plan %s is %s: nothing to abort", p.ID, p.State)
	}
	p.AbortRequested = true
	lock, err := st.TryLock()
	if errors.Is(err, ErrLocked) {
		// Its runner stops before the next step, and sweeps then.
		return p, st.Save(ctx, p)
	}
	if lock != nil {
		defer lock.Release()
	}
	p.State = Aborted
	if err := st.Save(ctx, p); err != nil {
		return p, err
	}
	if lock != nil {
		st.sweepStepScratch(nil)
	}
	return p, nil
}

// StepScratchPrefix begins the name of a scratch directory
// (internal/scratch) that a plan step makes in the Steward directory (an
// upgrade or rollback by restore's copy of the database, whole keyspace:
// StepScratchPrefix+"replace-").
//
// Invariant: a step's scratch directory is needed only by the process
// that made it, while its step runs (the step's next attempt makes its
// own), and a step runs only under the plan runner's lock. So whoever
// holds that lock with no step running removes every one whose maker is
// gone (its flock free), however young: Run before the first step and
// after it stops (done, failed or aborted), and RequestAbort when it
// aborts a plan no process runs. A killed step's copy (the coordinator
// killed at replace-spec-saved, whose resume finds the step done and
// makes none) is then gone when the plan ends, or when the next plan of
// any kind starts, instead of waiting for a later replace step's sweep.
const StepScratchPrefix = "tmp-step-"

// stepScratchPrefixes are swept under the runner's lock: a step's, and
// the replace step's name before StepScratchPrefix (an older Steward's).
var stepScratchPrefixes = []string{StepScratchPrefix, "tmp-replace-"}

// sweepStepScratch removes the step scratch directories no process holds;
// the caller holds the runner's lock. A failure is said, not returned: a
// copy left is removed by the next sweep.
func (s *Store) sweepStepScratch(say progress.Func) {
	for _, prefix := range stepScratchPrefixes {
		removed, err := scratch.SweepUnheld(s.dir, prefix)
		for _, d := range removed {
			say.Say("removed %s, left by a plan step that was killed", d)
		}
		if err != nil {
			say.Say("warning: %v", err)
		}
	}
}
