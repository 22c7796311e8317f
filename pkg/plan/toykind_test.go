package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The toy kind below is what a new plan kind writes, all of it: its Kind,
// its payload type, its steps and Executor, the function that makes,
// admits, saves and runs a plan, and one KindSpec. TestToyKind registers
// it with one line in a fresh registry and takes it through everything
// the commands and the conditions ask of a kind, with no other change.

const kindToy Kind = "toy"

// toyPayload is what a toy plan records about itself.
type toyPayload struct {
	Widget string `json:"widget"`
}

// toyEnv is the environment toy plans run in (a cluster, for real
// kinds): the plan store, and a step that fails once.
type toyEnv struct {
	store    *Store
	failOnce map[int]bool
	polished []string
}

// toyExecutor polishes the widget, one step per coat.
type toyExecutor struct{ e *toyEnv }

func (x toyExecutor) Execute(_ context.Context, p *Plan, s *Step) error {
	if x.e.failOnce[s.Index] {
		delete(x.e.failOnce, s.Index)
		return errors.New("the polish ran out")
	}
	v, err := PayloadOf[toyPayload](p)
	if err != nil {
		return err
	}
	x.e.polished = append(x.e.polished, fmt.Sprintf("%s coat %d", v.Widget, s.Number()))
	return nil
}

var toyAdmission = Admission{}

// startToy makes a toy plan, admits it, saves it and runs it.
func startToy(ctx context.Context, e *toyEnv, widget string, coats int) (*Plan, error) {
	if _, err := Admit(e.store, toyAdmission); err != nil {
		return nil, err
	}
	now := time.Now()
	p := &Plan{ID: NewID(kindToy, now), Kind: kindToy, State: Pending, CreatedAt: now.UTC()}
	if err := SetPayload(p, toyPayload{Widget: widget}); err != nil {
		return nil, err
	}
	for i := range coats {
		p.Steps = append(p.Steps, Step{Index: i, Kind: "coat", Description: fmt.Sprintf("coat %d", i+1), State: Pending})
	}
	if err := e.store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, Run(ctx, e.store, p.ID, toyExecutor{e}, nil)
}

func toyWidget(p *Plan) string {
	v, _ := PayloadOf[toyPayload](p)
	return v.Widget
}

// toyKind is the toy kind's registration.
var toyKind = KindSpec[*toyEnv]{
	Kind:      kindToy,
	Admission: toyAdmission,
	Resume: func(ctx context.Context, e *toyEnv, id string) error {
		return Run(ctx, e.store, id, toyExecutor{e}, nil)
	},
	Show:      func(p *Plan) string { return fmt.Sprintf("toy of widget %s, %s", toyWidget(p), p.State) },
	Describe:  func(p *Plan) string { return fmt.Sprintf("toy plan %s (widget %s)", p.ID, toyWidget(p)) },
	Condition: "ToyPolishInProgress",
}

// TestToyKind: a kind registered with one line is admitted, run, resumed
// after a failure, shown, described and reported by its own condition, as
// every kind is.
func TestToyKind(t *testing.T) {
	r := NewRegistry[*toyEnv]("")
	r.Register(toyKind) // the one registration line

	e := &toyEnv{store: OpenStore(t.TempDir()), failOnce: map[int]bool{1: true}}
	p, err := startToy(t.Context(), e, "w-1", 3)
	if _, ok := errors.AsType[*StepError](err); !ok {
		t.Fatalf("the toy plan's failing coat: %v", err)
	}
	// Admission: a second toy plan is refused while the first has work left.
	if _, err := startToy(t.Context(), e, "w-2", 1); err == nil || err.Error() != "toy plan "+p.ID+" is failed" {
		t.Fatalf("a second toy plan while the first failed: %v", err)
	}
	latest, err := e.store.Latest()
	if err != nil {
		t.Fatal(err)
	}
	// plan show, its JSON and the condition, while failed.
	if got, err := r.Show(latest); err != nil || got != "toy of widget w-1, failed" {
		t.Errorf("Show = %q, %v", got, err)
	}
	if v, err := r.View(latest); err != nil || v.(*Plan).ID != p.ID {
		t.Errorf("View = %v, %v", v, err)
	}
	what, cond, ok := r.Describe(latest)
	if !ok || cond != "ToyPolishInProgress" || what != "toy plan "+p.ID+" (widget w-1)" {
		t.Errorf("Describe = %q, %q, %v", what, cond, ok)
	}
	if got := r.Conditions(); len(got) != 1 || got[0] != "ToyPolishInProgress" {
		t.Errorf("Conditions = %v", got)
	}
	// plan resume: from the failed coat to the end.
	if err := r.Resume(t.Context(), e, latest); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.polished, ", "); got != "w-1 coat 1, w-1 coat 2, w-1 coat 3" {
		t.Errorf("polished %s", got)
	}
	done, err := e.store.Get(p.ID)
	if err != nil || done.State != Done {
		t.Fatalf("after the resume: %+v, %v", done, err)
	}
	if _, err := r.Resumable(done); err == nil {
		t.Error("a done toy plan is resumable")
	}
	if got, _ := r.Show(done); got != "toy of widget w-1, done" {
		t.Errorf("Show when done = %q", got)
	}
	// rollback: the toy kind names no undo, and this registry's default
	// is none.
	if _, err := r.UndoFor(done); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("UndoFor = %v", err)
	}
	// Once done, a new toy plan is admitted.
	if _, err := startToy(t.Context(), e, "w-2", 1); err != nil {
		t.Errorf("a toy plan after the first is done: %v", err)
	}
}
