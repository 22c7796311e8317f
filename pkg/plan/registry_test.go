package plan

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// env is the environment the test registry's kinds run in: it records
// what ran.
type env struct{ ran []string }

func testRegistry() *Registry[*env] {
	r := NewRegistry[*env]("back")
	resume := func(name string) func(context.Context, *env, string) error {
		return func(_ context.Context, e *env, id string) error {
			e.ran = append(e.ran, name+" "+id)
			return nil
		}
	}
	r.Register(KindSpec[*env]{Kind: "forth", Resume: resume("forth"), Condition: "Moving", Undo: "back"})
	r.Register(KindSpec[*env]{Kind: "back", Resume: resume("back"), Condition: "Moving",
		Rollback: func(context.Context, *env, UndoOptions) (*Plan, error) { return nil, nil }})
	r.Register(KindSpec[*env]{Kind: "turn", Resume: resume("turn"), Condition: "Turning", Describe: DescribeKind,
		Show: func(p *Plan) string { return "a turn" }, Undo: "unturn", UndoApplies: func(p *Plan) bool { return p.State != Done }})
	r.Register(KindSpec[*env]{Kind: "unturn", Resume: resume("unturn"), Condition: "Turning",
		Rollback: func(context.Context, *env, UndoOptions) (*Plan, error) { return nil, nil }})
	r.Register(KindSpec[*env]{Kind: "bare", Resume: resume("bare"), Condition: "Moving", Undo: "forth"})
	return r
}

// TestRegisterRefuses: a kind registered twice, or without what every kind
// must say, panics as the program starts.
func TestRegisterRefuses(t *testing.T) {
	ok := func(context.Context, *env, string) error { return nil }
	for name, s := range map[string]KindSpec[*env]{
		"twice":        {Kind: "forth", Resume: ok, Condition: "Moving"},
		"no name":      {Resume: ok, Condition: "Moving"},
		"no resume":    {Kind: "new", Condition: "Moving"},
		"no condition": {Kind: "new", Resume: ok},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%s) did not panic", name)
				}
			}()
			testRegistry().Register(s)
		})
	}
}

func TestRegistryKinds(t *testing.T) {
	r := testRegistry()
	if got := strings.Join(kindStrings(r.Kinds()), ","); got != "back,bare,forth,turn,unturn" {
		t.Errorf("Kinds = %s", got)
	}
	if got := strings.Join(r.Conditions(), ","); got != "Moving,Turning" {
		t.Errorf("Conditions = %s", got)
	}
	if _, err := r.Lookup("nowhere"); !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Errorf("Lookup(unknown) = %v", err)
	}
}

func kindStrings(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}

// TestRegistryResume: the kind's Resume runs an active plan; an unknown
// kind and a plan that is over are clear errors, and nothing runs.
func TestRegistryResume(t *testing.T) {
	r := testRegistry()
	e := &env{}
	if err := r.Resume(context.Background(), e, &Plan{ID: "t-1", Kind: "turn", State: Failed}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(e.ran, ";") != "turn t-1" {
		t.Fatalf("ran %v, want the turn kind's Resume", e.ran)
	}
	e.ran = nil
	err := r.Resume(context.Background(), e, &Plan{ID: "x-1", Kind: "nowhere", State: Failed})
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "plan x-1") || !strings.Contains(err.Error(), `"nowhere"`) {
		t.Errorf("Resume(unknown kind) = %v, want an error naming the plan and its kind", err)
	}
	err = r.Resume(context.Background(), e, &Plan{ID: "f-1", Kind: "forth", State: Done})
	if err == nil || err.Error() != "plan f-1 is done: nothing to resume" {
		t.Errorf("Resume(done) = %v", err)
	}
	if len(e.ran) != 0 {
		t.Errorf("ran %v", e.ran)
	}
}

// TestRegistryShow: plan show's summary is the kind's, ShowState by
// default; an unknown kind is an error.
func TestRegistryShow(t *testing.T) {
	r := testRegistry()
	p := &Plan{ID: "f-1", Kind: "forth", State: Running}
	if got, err := r.Show(p); err != nil || got != "forth, running" {
		t.Errorf("Show = %q, %v", got, err)
	}
	if got, err := r.Show(&Plan{ID: "t-1", Kind: "turn"}); err != nil || got != "a turn" {
		t.Errorf("Show = %q, %v", got, err)
	}
	if _, err := r.Show(&Plan{ID: "x-1", Kind: "nowhere"}); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("Show(unknown kind) = %v", err)
	}
}

// TestRegistryView: plan show -o json prints the record, or what the
// kind's View makes of it; an unknown kind is an error.
func TestRegistryView(t *testing.T) {
	r := testRegistry()
	p := &Plan{ID: "f-1", Kind: "forth", State: Running}
	if v, err := r.View(p); err != nil || v != any(p) {
		t.Errorf("View(forth) = %v, %v; want the record", v, err)
	}
	r.Register(KindSpec[*env]{Kind: "viewed", Resume: func(context.Context, *env, string) error { return nil }, Condition: "Moving",
		View: func(p *Plan) any { return map[string]string{"id": p.ID} }})
	if v, err := r.View(&Plan{ID: "v-1", Kind: "viewed"}); err != nil || v.(map[string]string)["id"] != "v-1" {
		t.Errorf("View(viewed) = %v, %v", v, err)
	}
	if _, err := r.View(&Plan{ID: "x-1", Kind: "nowhere"}); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("View(unknown kind) = %v", err)
	}
}

// TestRegistryDescribe: the condition's words and type come from the kind
// (DescribeKind by default); an unknown kind is named by its kind, without
// a type.
func TestRegistryDescribe(t *testing.T) {
	r := testRegistry()
	for _, tc := range []struct {
		p         *Plan
		what, typ string
		ok        bool
	}{
		{&Plan{ID: "f-1", Kind: "forth"}, "forth plan f-1", "Moving", true},
		{&Plan{ID: "t-1", Kind: "turn"}, "turn plan t-1", "Turning", true},
		{&Plan{ID: "x-1", Kind: "nowhere"}, "nowhere plan x-1", "", false},
	} {
		what, typ, ok := r.Describe(tc.p)
		if what != tc.what || typ != tc.typ || ok != tc.ok {
			t.Errorf("Describe(%s) = %q, %q, %v; want %q, %q, %v", tc.p.ID, what, typ, ok, tc.what, tc.typ, tc.ok)
		}
	}
}

// TestRegistryUndoFor: the kind's undo when it applies, else the default;
// an unknown kind, and an undo kind that plans no rollback, are errors.
func TestRegistryUndoFor(t *testing.T) {
	r := testRegistry()
	for _, tc := range []struct {
		latest *Plan
		want   Kind
		err    string
	}{
		{nil, "back", ""},
		{&Plan{ID: "f-1", Kind: "forth", State: Failed}, "back", ""},
		{&Plan{ID: "t-1", Kind: "turn", State: Failed}, "unturn", ""},
		{&Plan{ID: "t-1", Kind: "turn", State: Done}, "back", ""},
		{&Plan{ID: "u-1", Kind: "unturn", State: Failed}, "back", ""},
		{&Plan{ID: "x-1", Kind: "nowhere", State: Failed}, "", `plan x-1: unknown plan kind "nowhere"`},
		{&Plan{ID: "b-1", Kind: "bare", State: Failed}, "", "rollback: plan kind forth plans no rollback"},
	} {
		got, err := r.UndoFor(tc.latest)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("UndoFor(%v) = %v, want an error containing %q", tc.latest, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("UndoFor(%v) = %v", tc.latest, err)
		case tc.err == "" && got.Kind != tc.want:
			t.Errorf("UndoFor(%v) = %s, want %s", tc.latest, got.Kind, tc.want)
		}
	}
	if _, err := NewRegistry[*env]("").UndoFor(nil); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("UndoFor with no default undo registered = %v", err)
	}
}
