// Package plan holds plans (upgrades, rollbacks, CA rotations, adoptions,
// ...): an ordered list of steps, each with its state, and what the plan's
// kind records about it (its payload, payload.go), kept in a bbolt
// database in the Steward directory (never in etcd, which may be down
// halfway through a step), and the engine that runs them.
//
// Invariants, enforced in Run:
//   - a step is marked running, and that is synced to disk, before it acts;
//   - a step is marked done only after it returned without error;
//   - steps run in index order, and a step runs only when every step
//     before it is done;
//   - at most one process runs a plan at a time (an exclusive lock file).
//
// Because a step may die halfway, every Executor step must be idempotent:
// re-running it converges to the same result.
//
// Concurrency is between processes, not goroutines: the package starts no
// goroutine, and a *Plan and a *Store belong to the goroutine that uses
// them (Run's, for the plan it runs). Other processes share only the
// database file: bbolt's file lock serialises its transactions, the runner
// lock (DIR/run/plan.lock) admits one runner, and an abort requested by
// another process (AbortRequested) reaches the runner through Save, which
// keeps it.
//
// # Plan kinds
//
// The engine runs every kind of plan (upgrade, rollback, CA rotation...)
// the same way; what differs, each kind says once, in a KindSpec
// registered in a Registry (registry.go): the Admission that admits a new
// plan of the kind (Admit, the one check every plan start makes), how to
// resume it (its Executor built, Run called), how `steward plan show` and
// the status condition describe it, which condition reports it, and what
// `steward rollback` starts for it. What a kind records about a plan is
// its payload, of a type the kind's package owns (SetPayload, PayloadOf):
// the record has no field of any kind. The commands and the conditions ask
// the registry; none switches on kinds. The registry is generic over the
// environment plans run in, because this package may not import the
// cluster handle: pkg/cluster holds the one instance, cluster.PlanKinds.
//
// Adding a plan kind:
//
//  1. one package for it (an operation, above pkg/cluster): its Kind
//     constant, its steps and their Executor, its payload type if it
//     records one, and the function that builds a plan, admits it (Admit
//     with the kind's Admission), saves and runs it;
//  2. in that package, one registration:
//     func init() { cluster.PlanKinds.Register(plan.KindSpec[*cluster.Cluster]{...}) }
//  3. one line importing that package in
//     cmd/steward/internal/cli/plankinds.go, so that every command (and
//     the agent's status) knows the kind; its test lists the kinds.
package plan

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is the state of a plan or a step.
type State string

// States.
const (
	Pending    State = "pending"
	Running    State = "running"
	Done       State = "done"
	Failed     State = "failed"
	RolledBack State = "rolled back"
	Aborted    State = "aborted"
)

// Kind says what a plan is for.
type Kind string

// Plan kinds.
const (
	KindUpgrade  Kind = "upgrade"
	KindRollback Kind = "rollback"
	// KindCARotation replaces the cluster CA in phases (package carotate).
	KindCARotation Kind = "ca-rotation"
	// KindCARotationRollback brings a CA rotation stopped before it
	// dropped the old CA back to the old CA alone (package carotate,
	// `steward rollback`).
	KindCARotationRollback Kind = "ca-rotation-rollback"
	// KindAdopt hands a member of an attached cluster to an agent
	// (package adopt).
	KindAdopt Kind = "adopt"
	// KindAdoptUndo gives an adopted member back to its previous manager
	// (package adopt, `steward adopt --undo`).
	KindAdoptUndo Kind = "adopt-undo"
	// KindCertsTakeOver switches every adopted member to certificates
	// Steward issued from the operator's CA (package adopt, `steward
	// certs take-over`).
	KindCertsTakeOver Kind = "certs-take-over"
)

// Plan is a persisted sequence of steps.
type Plan struct {
	ID    string `json:"id"`
	Kind  Kind   `json:"kind"`
	State State  `json:"state"`
	// Error is the reason the plan failed.
	Error string `json:"error,omitempty"`
	// AbortRequested asks the running engine to stop after its step.
	AbortRequested bool `json:"abortRequested,omitempty"`
	// Force skips the pre-flight checks documented as overridable.
	Force bool `json:"force,omitempty"`
	// HealthTimeoutSeconds bounds each health, catch-up and version wait
	// of a step (0: the executor's default).
	HealthTimeoutSeconds int `json:"healthTimeoutSeconds,omitempty"`
	// Of is, for a rollback (of an upgrade or of a CA rotation), the ID of
	// the plan it rolls back.
	Of        string    `json:"of,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Steps     []Step    `json:"steps"`
	// Values carries facts steps record for later steps (e.g. the ID of
	// the verified pre-upgrade backup).
	Values map[string]string `json:"values,omitempty"`
	// Payload is what the plan's kind records about the whole plan when
	// it is made, in the kind's own type (an upgrade's versions and
	// strategy, say): JSON that only the kind's package reads, through
	// SetPayload and PayloadOf (payload.go). Absent for a kind that
	// records nothing.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Number is the step's place counted from 1, as every table, progress
// line and message shows it: the steps of a plan of six are 1 to 6.
func (s Step) Number() int { return s.Index + 1 }

// Step is one action of a plan.
type Step struct {
	// Index is the step's place from 0 (JSON, crash points); people
	// read Number.
	Index int    `json:"index"`
	Kind  string `json:"kind"`
	// Member is the member the step acts on, when it acts on one.
	Member string `json:"member,omitempty"`
	// Version is the etcd version the step moves to or waits for.
	Version string `json:"version,omitempty"`
	// Description says in words what the step does.
	Description string     `json:"description"`
	State       State      `json:"state"`
	Attempts    int        `json:"attempts"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	EndedAt     *time.Time `json:"endedAt,omitempty"`
	Error       string     `json:"error,omitempty"`
}

// Active reports whether the plan still has work that must finish or be
// resumed before another plan may start.
func (p *Plan) Active() bool {
	return p.State == Pending || p.State == Running || p.State == Failed
}

// Current returns the first step that is not done (nil when none is left).
func (p *Plan) Current() *Step {
	for i := range p.Steps {
		if p.Steps[i].State != Done {
			return &p.Steps[i]
		}
	}
	return nil
}

// OpenSince returns, in a plan still active, the newest done step of kind
// open that no later done step of kind close follows (nil when there is
// none, or the plan is over): something a step began and a later step
// ends, still begun. For example etcd's downgrade, which a rollback's
// downgrade-enable step enables and its cluster-version step ends.
func (p *Plan) OpenSince(open, close string) *Step {
	if !p.Active() {
		return nil
	}
	var begun *Step
	for i := range p.Steps {
		s := &p.Steps[i]
		switch {
		case s.State != Done:
		case s.Kind == open:
			begun = s
		case s.Kind == close:
			begun = nil
		}
	}
	return begun
}

// Value returns a recorded value.
func (p *Plan) Value(k string) string { return p.Values[k] }

// SetValue records a value for later steps.
func (p *Plan) SetValue(k, v string) {
	if p.Values == nil {
		p.Values = map[string]string{}
	}
	p.Values[k] = v
}

// NewID returns a plan ID from its kind and creation time.
func NewID(k Kind, t time.Time) string {
	return fmt.Sprintf("%s-%s", k, t.UTC().Format("20060102T150405Z"))
}

// ActiveError refuses a new plan while another one is active (pending,
// running, failed or interrupted), before anything is changed. Its message
// names the plan and its state; what the operator may do with that plan
// (finish it, always; stop it, when Abort; undo it, when Undo) is for the
// command to word, with its own commands.
type ActiveError struct {
	Plan *Plan
	// Name is how the message names the plan; empty: "KIND plan ID".
	Name string
	// At says where the plan stopped (" at step N (description)"), or is
	// empty.
	At string
	// Abort: stopping the plan is a way on; Undo: rolling it back is.
	Abort, Undo bool
}

func (e *ActiveError) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("%s plan %s", e.Plan.Kind, e.Plan.ID)
	}
	return fmt.Sprintf("%s is %s%s", name, e.Plan.State, e.At)
}

// RefuseActive returns the *ActiveError of active plan p that another plan may
// stop (Abort).
func RefuseActive(p *Plan) error { return &ActiveError{Plan: p, Abort: true} }
