package plan

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Executor performs steps. Execute must be idempotent: it is called again
// for a step that completed but was not recorded as done, and for one that
// died halfway.
type Executor interface {
	Execute(ctx context.Context, p *Plan, s *Step) error
}

// ErrAborted is returned by Run when an abort request stopped the plan.
var ErrAborted = errors.New("plan aborted")

// Run runs the plan with the given ID from its first step that is not done,
// under the runner's lock. progress, when not nil, hears about each step.
func Run(ctx context.Context, st *Store, id string, ex Executor, progress func(string, ...any)) error {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	lock, err := st.TryLock()
	if err != nil {
		return err
	}
	defer lock.Release()
	p, err := st.Get(id)
	if err != nil {
		return err
	}
	switch p.State {
	case Done:
		progress("plan %s is already done", p.ID)
		return nil
	case Aborted, RolledBack:
		return fmt.Errorf("plan %s is %s: start a new plan instead", p.ID, p.State)
	}
	p.State, p.Error = Running, ""
	if err := st.Save(p); err != nil {
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
			progress("plan %s aborted before step %d", p.ID, s.Index)
			if err := st.Save(p); err != nil {
				return err
			}
			return ErrAborted
		}
		now := time.Now().UTC()
		s.State, s.Error, s.StartedAt, s.EndedAt = Running, "", &now, nil
		s.Attempts++
		if err := st.Save(p); err != nil { // on disk before the step acts
			return err
		}
		progress("step %d/%d: %s", s.Index, len(p.Steps)-1, s.Description)
		err := ex.Execute(ctx, p, s)
		end := time.Now().UTC()
		s.EndedAt = &end
		if err != nil {
			s.State, s.Error = Failed, err.Error()
			p.State = Failed
			p.Error = fmt.Sprintf("step %d (%s) failed: %v", s.Index, s.Description, err)
			if serr := st.Save(p); serr != nil {
				return errors.Join(err, serr)
			}
			return fmt.Errorf("%s; fix the cause, then run `steward plan resume` (or `steward plan abort`)", p.Error)
		}
		s.State = Done
		if err := st.Save(p); err != nil {
			return err
		}
	}
	p.State = Done
	progress("plan %s done", p.ID)
	return st.Save(p)
}

// RequestAbort marks the plan so the engine stops before its next step.
// A plan that no process runs is marked aborted at once.
func RequestAbort(st *Store, id string) (*Plan, error) {
	p, err := st.Get(id)
	if err != nil {
		return nil, err
	}
	if !p.Active() {
		return p, fmt.Errorf("plan %s is %s: nothing to abort", p.ID, p.State)
	}
	p.AbortRequested = true
	if !st.Locked() {
		p.State = Aborted
	}
	return p, st.Save(p)
}
