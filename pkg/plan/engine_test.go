package plan

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// recorder is an Executor that records the steps it ran and fails a step
// while fail says so.
type recorder struct {
	ran  []int
	fail map[int]error
	hook func(p *Plan, s *Step)
}

func (r *recorder) Execute(_ context.Context, p *Plan, s *Step) error {
	r.ran = append(r.ran, s.Index)
	if r.hook != nil {
		r.hook(p, s)
	}
	return r.fail[s.Index]
}

func newPlan(t *testing.T, n int) (*Store, *Plan) {
	t.Helper()
	st := OpenStore(t.TempDir())
	p := &Plan{ID: NewID(KindUpgrade, time.Unix(0, 0)), Kind: KindUpgrade, State: Pending, From: "3.5.35", To: "3.6.16"}
	for i := range n {
		p.Steps = append(p.Steps, Step{Index: i, Kind: "k", Description: "step", State: Pending})
	}
	if err := st.Save(p); err != nil {
		t.Fatal(err)
	}
	return st, p
}

func TestRunInOrder(t *testing.T) {
	st, p := newPlan(t, 4)
	r := &recorder{}
	if err := Run(context.Background(), st, p.ID, r, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.ran, []int{0, 1, 2, 3}) {
		t.Fatalf("ran %v", r.ran)
	}
	got, _ := st.Latest()
	if got.State != Done {
		t.Fatalf("plan state %s", got.State)
	}
	for _, s := range got.Steps {
		if s.State != Done || s.StartedAt == nil || s.EndedAt == nil || s.Attempts != 1 {
			t.Fatalf("step %+v", s)
		}
	}
	// Running a done plan does nothing.
	r.ran = nil
	if err := Run(context.Background(), st, p.ID, r, nil); err != nil || len(r.ran) != 0 {
		t.Fatalf("re-run of a done plan: ran %v err %v", r.ran, err)
	}
}

func TestFailureThenResume(t *testing.T) {
	st, p := newPlan(t, 3)
	r := &recorder{fail: map[int]error{1: errors.New("member etcd-2 not healthy")}}
	err := Run(context.Background(), st, p.ID, r, nil)
	if err == nil || !strings.Contains(err.Error(), "step 1") || !strings.Contains(err.Error(), "plan resume") {
		t.Fatalf("error %v", err)
	}
	got, _ := st.Get(p.ID)
	if got.State != Failed || got.Steps[1].State != Failed || got.Steps[1].Error != "member etcd-2 not healthy" || got.Steps[2].State != Pending {
		t.Fatalf("after failure: %+v", got)
	}
	if !got.Active() {
		t.Fatal("a failed plan must stay active until resumed or aborted")
	}
	r.fail = nil
	r.ran = nil
	if err := Run(context.Background(), st, p.ID, r, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.ran, []int{1, 2}) {
		t.Fatalf("resume ran %v, want the failed step then the rest", r.ran)
	}
	got, _ = st.Get(p.ID)
	if got.Steps[1].Attempts != 2 || got.Steps[1].Error != "" {
		t.Fatalf("resumed step %+v", got.Steps[1])
	}
}

// TestCrashMidStep: a process that died while a step ran left it marked
// running; resume runs that step again (it is idempotent) and goes on.
func TestCrashMidStep(t *testing.T) {
	st, p := newPlan(t, 3)
	p.State = Running
	p.Steps[0].State = Done
	p.Steps[1].State = Running
	if err := st.Save(p); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	if err := Run(context.Background(), st, p.ID, r, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.ran, []int{1, 2}) {
		t.Fatalf("ran %v", r.ran)
	}
}

// TestStepMarkedRunningBeforeItActs: when Execute runs, the store already
// says the step is running.
func TestStepMarkedRunningBeforeItActs(t *testing.T) {
	st, p := newPlan(t, 2)
	r := &recorder{hook: func(_ *Plan, s *Step) {
		got, err := st.Get(p.ID)
		if err != nil {
			t.Error(err)
			return
		}
		if got.Steps[s.Index].State != Running || got.State != Running {
			t.Errorf("step %d acts while the store says %s (plan %s)", s.Index, got.Steps[s.Index].State, got.State)
		}
	}}
	if err := Run(context.Background(), st, p.ID, r, nil); err != nil {
		t.Fatal(err)
	}
}

func TestAbort(t *testing.T) {
	// Abort requested while the engine runs: it stops before the next step.
	st, p := newPlan(t, 3)
	r := &recorder{hook: func(_ *Plan, s *Step) {
		if s.Index == 0 {
			if _, err := RequestAbort(st, p.ID); err != nil {
				t.Error(err)
			}
		}
	}}
	if err := Run(context.Background(), st, p.ID, r, nil); !errors.Is(err, ErrAborted) {
		t.Fatalf("run: %v, want ErrAborted", err)
	}
	got, _ := st.Get(p.ID)
	if !reflect.DeepEqual(r.ran, []int{0}) || got.State != Aborted || got.Steps[0].State != Done || got.Steps[1].State != Pending {
		t.Fatalf("ran %v, plan %+v", r.ran, got)
	}
	if err := Run(context.Background(), st, p.ID, r, nil); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("resume of an aborted plan: %v", err)
	}
	// Abort with no engine running: aborted at once; twice is an error.
	st2, p2 := newPlan(t, 2)
	if got, err := RequestAbort(st2, p2.ID); err != nil || got.State != Aborted {
		t.Fatalf("abort idle plan: %v %+v", err, got)
	}
	if _, err := RequestAbort(st2, p2.ID); err == nil {
		t.Fatal("aborting an aborted plan must fail")
	}
}

func TestOneRunnerAtATime(t *testing.T) {
	st, p := newPlan(t, 2)
	l, err := st.TryLock()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Locked() {
		t.Fatal("Locked false while the lock is held")
	}
	if err := Run(context.Background(), st, p.ID, &recorder{}, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second runner: %v, want ErrLocked", err)
	}
	l.Release()
	if st.Locked() {
		t.Fatal("Locked true after release")
	}
}

func TestNoPlan(t *testing.T) {
	st := OpenStore(t.TempDir())
	if _, err := st.Latest(); !errors.Is(err, ErrNoPlan) {
		t.Fatalf("Latest on an empty dir: %v", err)
	}
	if ps, err := st.List(); err != nil || len(ps) != 0 {
		t.Fatalf("List on an empty dir: %v %v", ps, err)
	}
}
