package plan

import (
	"errors"
	"fmt"
)

// Admission is the rule that admits a new plan, or an action that must not
// run under an open one, from the plan store: the one check every plan
// start (and recovery) makes, through Admit.
type Admission struct {
	// SkipLock admits while another process holds the runner's lock (the
	// latest plan, then running, still refuses). Plan starts check it.
	SkipLock bool
	// Locked, when set, is the refusal while another process holds the
	// runner's lock (an error wrapping ErrLocked, which the command words
	// advice for); nil: ErrLocked.
	Locked error
	// NeedPlan refuses a store with no plan at all (ErrNoPlan): a rollback
	// needs the plan it rolls back.
	NeedPlan bool
	// IgnoreUnreadable admits when the store cannot be read.
	IgnoreUnreadable bool
	// Refuse words the refusal of the latest plan, which is active, and
	// returns nil to admit it (nil: every active plan refuses, with
	// RefuseActive).
	Refuse func(open *Plan) error
}

// OpenError is the refusal of an action because a plan is open, worded by
// the action (Refusef); its message is the refusal's whole text. The
// refusal of a new plan is an *ActiveError instead, which the command
// completes with its advice.
type OpenError struct {
	// Plan is the open plan.
	Plan *Plan
	Msg  string
}

func (e *OpenError) Error() string { return e.Msg }

// Refusef returns an *OpenError about open, its message formatted.
func Refusef(open *Plan, format string, args ...any) error {
	return &OpenError{Plan: open, Msg: fmt.Sprintf(format, args...)}
}

// Admit applies a to the store: it returns the latest plan (nil when there
// is none) and nil when a admits, else the refusal: ErrLocked (or
// a.Locked), ErrNoPlan (a.NeedPlan), the store's read error, or the
// refusal of a.Refuse for an active latest plan (by default the
// *ActiveError of RefuseActive).
func Admit(st *Store, a Admission) (*Plan, error) {
	if !a.SkipLock && st.Locked() {
		if a.Locked != nil {
			return nil, a.Locked
		}
		return nil, ErrLocked
	}
	latest, err := st.Latest()
	switch {
	case errors.Is(err, ErrNoPlan) && !a.NeedPlan:
		return nil, nil
	case err != nil && a.IgnoreUnreadable && !errors.Is(err, ErrNoPlan):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if !latest.Active() {
		return latest, nil
	}
	refuse := a.Refuse
	if refuse == nil {
		refuse = RefuseActive
	}
	return latest, refuse(latest)
}
