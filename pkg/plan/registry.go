package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The types of the status conditions that report plans (KindSpec's
// Condition), in DEP-01's style: each True while a plan of its kinds has
// work left (running, failed or interrupted), False with the latest plan
// over or of another condition's kinds.
const (
	// CondUpgradeInProgress reports upgrades and their rollbacks.
	CondUpgradeInProgress = "UpgradeInProgress"
	// CondCertificateRotationInProgress reports CA rotations, their
	// rollbacks and certificate take-overs.
	CondCertificateRotationInProgress = "CertificateRotationInProgress"
	// CondAdoptionInProgress reports adoptions and their undoing.
	CondAdoptionInProgress = "AdoptionInProgress"
)

// KindSpec is what one plan kind tells the registry.
type KindSpec[E any] struct {
	// Kind is the kind, as plans record it.
	Kind Kind
	// Admission admits a new plan of this kind (Admit).
	Admission Admission
	// Attached says a plan of this kind runs on an attached cluster: it is
	// resumed with only this machine's agent started (adopt), not on a
	// cluster whose members Steward runs.
	Attached bool
	// Resume builds the kind's executor and runs the engine on plan id
	// from its first step that is not done (with whatever the kind does
	// once the plan is done). Required.
	Resume func(ctx context.Context, env E, id string) error
	// Show is the summary `steward plan show` prints after "plan ID: "
	// (nil: ShowState).
	Show func(p *Plan) string
	// View is what `steward plan show -o json|yaml` prints of a plan of
	// this kind (nil: the record, its payload as it is): a kind whose
	// output had fields before payloads existed keeps them there.
	View func(p *Plan) any
	// Describe names the plan in the status condition that reports it
	// (nil: DescribeKind).
	Describe func(p *Plan) string
	// Condition is the type of the status condition that reports a plan
	// of this kind (one of the Cond constants, or a new one documented
	// in docs/status.md). Required.
	Condition string
	// Undo is the kind of plan `steward rollback` starts when the latest
	// plan is of this kind ("": the registry's default undo), when
	// UndoApplies (nil: always) says so for that plan.
	Undo        Kind
	UndoApplies func(latest *Plan) bool
	// Rollback plans a plan of this kind that undoes the latest plan,
	// saves it and runs it: set for the kinds that are some kind's Undo
	// (and for the default undo).
	Rollback func(ctx context.Context, env E, o UndoOptions) (*Plan, error)
}

// UndoOptions are the options of `steward rollback`; a kind uses those
// that apply to it.
type UndoOptions struct {
	// Strategy is how the way back goes ("": the kind's default).
	Strategy string
	// Force skips the checks documented as overridable.
	Force bool
	// HealthTimeout bounds each health, catch-up and version wait.
	HealthTimeout time.Duration
}

// ErrUnknownKind is wrapped by the registry's errors about a kind no
// package registered (a plan written by another Steward version, say).
var ErrUnknownKind = errors.New("unknown plan kind")

// Registry holds the plan kinds, each registered once. It is filled by the
// kinds' packages as they initialise and read-only afterwards.
type Registry[E any] struct {
	kinds       map[Kind]*KindSpec[E]
	defaultUndo Kind
}

// NewRegistry returns an empty registry whose `steward rollback`, for a
// latest plan whose kind names no undo, starts a plan of kind defaultUndo.
func NewRegistry[E any](defaultUndo Kind) *Registry[E] {
	return &Registry[E]{kinds: map[Kind]*KindSpec[E]{}, defaultUndo: defaultUndo}
}

// Register adds a kind. It panics (a programming error, met as the
// program starts) on a kind registered twice or a spec missing a required
// field.
func (r *Registry[E]) Register(s KindSpec[E]) {
	switch {
	case s.Kind == "":
		panic("plan: registering a kind without a name")
	case r.kinds[s.Kind] != nil:
		panic(fmt.Sprintf("plan: kind %s registered twice", s.Kind))
	case s.Resume == nil:
		panic(fmt.Sprintf("plan: kind %s registered without Resume", s.Kind))
	case s.Condition == "":
		panic(fmt.Sprintf("plan: kind %s registered without a Condition", s.Kind))
	}
	r.kinds[s.Kind] = &s
}

// Kinds returns the registered kinds, sorted.
func (r *Registry[E]) Kinds() []Kind {
	out := make([]Kind, 0, len(r.kinds))
	for k := range r.kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Lookup returns the spec of kind k, or an error wrapping ErrUnknownKind.
func (r *Registry[E]) Lookup(k Kind) (*KindSpec[E], error) {
	if s := r.kinds[k]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w %q: this steward knows the kinds %v", ErrUnknownKind, k, r.Kinds())
}

// For returns the spec of p's kind, the error naming the plan.
func (r *Registry[E]) For(p *Plan) (*KindSpec[E], error) {
	s, err := r.Lookup(p.Kind)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", p.ID, err)
	}
	return s, nil
}

// Resumable returns the spec of the latest plan p's kind when there is
// something to resume: an error for an unknown kind or a plan that is not
// active.
func (r *Registry[E]) Resumable(p *Plan) (*KindSpec[E], error) {
	s, err := r.For(p)
	if err != nil {
		return nil, err
	}
	if !p.Active() {
		return nil, fmt.Errorf("plan %s is %s: nothing to resume", p.ID, p.State)
	}
	return s, nil
}

// Resume runs the active plan p, with its kind's Resume.
func (r *Registry[E]) Resume(ctx context.Context, env E, p *Plan) error {
	s, err := r.Resumable(p)
	if err != nil {
		return err
	}
	return s.Resume(ctx, env, p.ID)
}

// Show returns the summary `steward plan show` prints of p after
// "plan ID: ".
func (r *Registry[E]) Show(p *Plan) (string, error) {
	s, err := r.For(p)
	if err != nil {
		return "", err
	}
	if s.Show == nil {
		return ShowState(p), nil
	}
	return s.Show(p), nil
}

// View returns what `steward plan show -o json|yaml` prints of p: its
// kind's View, or the record itself.
func (r *Registry[E]) View(p *Plan) (any, error) {
	s, err := r.For(p)
	if err != nil {
		return nil, err
	}
	if s.View == nil {
		return p, nil
	}
	return s.View(p), nil
}

// Describe names p in its status condition, and returns the condition's
// type; ok is false for a kind no package registered (the caller reports
// it as it sees fit).
func (r *Registry[E]) Describe(p *Plan) (what, condition string, ok bool) {
	s := r.kinds[p.Kind]
	if s == nil {
		return DescribeKind(p), "", false
	}
	if s.Describe == nil {
		return DescribeKind(p), s.Condition, true
	}
	return s.Describe(p), s.Condition, true
}

// Conditions returns the condition types the registered kinds report,
// sorted, each once.
func (r *Registry[E]) Conditions() []string {
	var out []string
	for _, s := range r.kinds {
		if !slices.Contains(out, s.Condition) {
			out = append(out, s.Condition)
		}
	}
	slices.Sort(out)
	return out
}

// UndoFor returns the spec of the kind `steward rollback` starts when
// latest is the latest plan (nil: none): its kind's Undo when that applies
// to it, else the default undo. An unknown kind, or an undo kind without
// Rollback, is an error.
func (r *Registry[E]) UndoFor(latest *Plan) (*KindSpec[E], error) {
	undo := r.defaultUndo
	if latest != nil {
		s, err := r.For(latest)
		if err != nil {
			return nil, err
		}
		if s.Undo != "" && (s.UndoApplies == nil || s.UndoApplies(latest)) {
			undo = s.Undo
		}
	}
	u, err := r.Lookup(undo)
	if err != nil {
		return nil, fmt.Errorf("rollback: %w", err)
	}
	if u.Rollback == nil {
		return nil, fmt.Errorf("rollback: plan kind %s plans no rollback", u.Kind)
	}
	return u, nil
}

// ShowState is the summary `plan show` prints of a kind that gives none:
// "KIND, STATE".
func ShowState(p *Plan) string {
	return fmt.Sprintf("%s, %s", p.Kind, p.State)
}

// DescribeKind names a plan by its kind and ID alone: "KIND plan ID".
func DescribeKind(p *Plan) string {
	return fmt.Sprintf("%s plan %s", p.Kind, p.ID)
}
