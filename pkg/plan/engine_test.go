package plan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
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
	p := &Plan{ID: NewID(KindUpgrade, time.Unix(0, 0)), Kind: KindUpgrade, State: Pending}
	for i := range n {
		p.Steps = append(p.Steps, Step{Index: i, Kind: "k", Description: "step", State: Pending})
	}
	if err := st.Save(t.Context(), p); err != nil {
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
	if err == nil || !strings.Contains(err.Error(), "step 2 (") {
		t.Fatalf("error %v", err)
	}
	got, _ := st.Get(p.ID)
	if got.State != Failed || got.Error != err.Error() || got.Steps[1].State != Failed || got.Steps[1].Error != "member etcd-2 not healthy" || got.Steps[2].State != Pending {
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

// errSentinel stands for a cause a caller tests for with errors.Is.
var errSentinel = errors.New("member etcd-2 not healthy")

// TestStepErrorWrapsCause: a failed step's error reaches Run's caller
// whole: errors.Is sees the step's cause through the *StepError, which
// names the plan and the step, and the message says which step failed and
// why, with no CLI hint (the command layer adds that).
func TestStepErrorWrapsCause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stepErr error
		wantMsg string
	}{
		{"sentinel", errSentinel, "step 2 (swap etcd-2) failed: member etcd-2 not healthy"},
		{"wrapped sentinel", fmt.Errorf("health gate: %w", errSentinel), "step 2 (swap etcd-2) failed: health gate: member etcd-2 not healthy"},
		{"twice wrapped", fmt.Errorf("step: %w", fmt.Errorf("health gate: %w", errSentinel)), "step 2 (swap etcd-2) failed: step: health gate: member etcd-2 not healthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, p := newPlan(t, 3)
			p.Steps[1].Description = "swap etcd-2"
			if err := st.Save(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			err := Run(t.Context(), st, p.ID, &recorder{fail: map[int]error{1: tc.stepErr}}, nil)
			if !errors.Is(err, errSentinel) {
				t.Fatalf("errors.Is(%v, errSentinel) = false", err)
			}
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v is not a *StepError", err, err)
			}
			if se.Plan != p.ID || se.Index != 1 || se.Description != "swap etcd-2" || se.Err != tc.stepErr {
				t.Fatalf("StepError %+v, want plan %s, step 1 (swap etcd-2), the step's error", se, p.ID)
			}
			if err.Error() != tc.wantMsg {
				t.Fatalf("message %q, want %q", err.Error(), tc.wantMsg)
			}
			if got, _ := st.Get(p.ID); got.Error != tc.wantMsg {
				t.Fatalf("recorded plan error %q, want %q", got.Error, tc.wantMsg)
			}
		})
	}
}

// TestCrashMidStep: a process that died while a step ran left it marked
// running; resume runs that step again (it is idempotent) and goes on.
func TestCrashMidStep(t *testing.T) {
	st, p := newPlan(t, 3)
	p.State = Running
	p.Steps[0].State = Done
	p.Steps[1].State = Running
	if err := st.Save(t.Context(), p); err != nil {
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
			if _, err := RequestAbort(t.Context(), st, p.ID); err != nil {
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
	if got, err := RequestAbort(t.Context(), st2, p2.ID); err != nil || got.State != Aborted {
		t.Fatalf("abort idle plan: %v %+v", err, got)
	}
	if _, err := RequestAbort(t.Context(), st2, p2.ID); err == nil {
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

// crashHelperEnv holds, in the child process TestCrashPoints starts, the
// directory of the plan store to run.
const crashHelperEnv = "PLAN_TEST_CRASH_DIR"

// printer is an Executor that writes "ran N" to stdout for each step.
type printer struct{}

func (printer) Execute(_ context.Context, _ *Plan, s *Step) error {
	_, err := fmt.Fprintf(os.Stdout, "ran %d\n", s.Index)
	return err
}

// TestHelperProcess is not a test: run by TestCrashPoints as a child, it
// runs the latest plan of the store in $PLAN_TEST_CRASH_DIR.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashHelperEnv)
	if dir == "" {
		return
	}
	st := OpenStore(dir)
	p, err := st.Latest()
	if err == nil {
		err = Run(t.Context(), st, p.ID, printer{}, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestCrashPoints: with STEWARD_CRASHPOINT set, a process running a plan
// dies by SIGKILL exactly there: before a step's action (the step recorded
// running, its action not run) or after it (the action ran, the step still
// recorded running); a resume runs that step again and finishes.
func TestCrashPoints(t *testing.T) {
	for _, tc := range []struct {
		point   string
		step    int
		wantRan string // the child's stdout: the actions that ran
	}{
		{"plan-step-before:0", 0, ""},
		{"plan-step-after:0", 0, "ran 0\n"},
		{"plan-step-before:2", 2, "ran 0\nran 1\n"},
		{"plan-step-after:2", 2, "ran 0\nran 1\nran 2\n"},
	} {
		t.Run(tc.point, func(t *testing.T) {
			st, p := newPlan(t, 3)
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(), crashHelperEnv+"="+filepath.Dir(st.Path()), crashpoint.EnvVar+"="+tc.point)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("child: %v, want killed by SIGKILL\nstderr: %s", err, stderr.String())
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child ended with %v, want killed by SIGKILL\nstderr: %s", ee, stderr.String())
			}
			if want := "crashpoint: " + tc.point + "\n"; stderr.String() != want {
				t.Fatalf("stderr %q, want %q", stderr.String(), want)
			}
			if stdout.String() != tc.wantRan {
				t.Fatalf("actions run %q, want %q", stdout.String(), tc.wantRan)
			}
			got, err := st.Get(p.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range got.Steps {
				want, attempts := Pending, 0
				switch {
				case s.Index < tc.step:
					want, attempts = Done, 1
				case s.Index == tc.step:
					want, attempts = Running, 1
				}
				if s.State != want || s.Attempts != attempts {
					t.Fatalf("after the crash, step %d is %s with %d attempt(s), want %s with %d", s.Index, s.State, s.Attempts, want, attempts)
				}
			}
			r := &recorder{}
			if err := Run(t.Context(), st, p.ID, r, nil); err != nil {
				t.Fatal(err)
			}
			var wantRan []int
			for i := tc.step; i < 3; i++ {
				wantRan = append(wantRan, i)
			}
			if !reflect.DeepEqual(r.ran, wantRan) {
				t.Fatalf("resume ran %v, want %v", r.ran, wantRan)
			}
			if got, _ = st.Get(p.ID); got.State != Done || got.Steps[tc.step].Attempts != 2 {
				t.Fatalf("after resume: plan %s, step %d attempts %d; want done, 2", got.State, tc.step, got.Steps[tc.step].Attempts)
			}
		})
	}
}

// TestMirrorGetsSaveContext: the Mirror runs with the context given to
// Save, so a caller that gives up stops the copy; the plan is on disk all
// the same, and Run passes its own context to every save.
func TestMirrorGetsSaveContext(t *testing.T) {
	type key struct{}
	st, p := newPlan(t, 2)
	var got []any
	st.Mirror = func(ctx context.Context, _ *Plan) error {
		got = append(got, ctx.Value(key{}))
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), key{}, "run"))
	if err := Run(ctx, st, p.ID, &recorder{}, nil); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || slices.ContainsFunc(got, func(v any) bool { return v != "run" }) {
		t.Errorf("the mirror saw the contexts %v; want Run's at every save", got)
	}
	cancel()
	p.Values = map[string]string{"k": "v"}
	if err := st.Save(ctx, p); !errors.Is(err, context.Canceled) {
		t.Errorf("Save with a cancelled context: %v; want the mirror's context.Canceled", err)
	}
	if saved, err := st.Get(p.ID); err != nil || saved.Value("k") != "v" {
		t.Errorf("the plan saved with a cancelled context is not on disk: %v, %v", saved, err)
	}
}

// TestRunAmended: amend sees a plan about to run, under the lock, and what
// it adds is saved before the first step runs and then run in order after
// the steps done already; a done plan is not amended.
func TestRunAmended(t *testing.T) {
	st, p := newPlan(t, 2)
	p.Steps[0].State = Done
	p.State = Failed
	if err := st.Save(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	calls := 0
	amend := func(p *Plan) bool {
		calls++
		if len(p.Steps) == 3 {
			return false
		}
		p.Steps = append(p.Steps, Step{Index: 2, Kind: "added", Description: "added", State: Pending})
		return true
	}
	r := &recorder{hook: func(_ *Plan, s *Step) {
		if s.Index != 1 {
			return
		}
		// Saved before the first step ran.
		got, err := st.Get(p.ID)
		if err != nil || len(got.Steps) != 3 {
			t.Errorf("plan on disk when step 1 runs: %+v, %v; want the added step", got, err)
		}
	}}
	if err := RunAmended(context.Background(), st, p.ID, r, amend, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.ran, []int{1, 2}) {
		t.Fatalf("ran %v, want [1 2]", r.ran)
	}
	got, _ := st.Get(p.ID)
	if got.State != Done || len(got.Steps) != 3 || got.Steps[2].State != Done || got.Steps[0].Attempts != 0 {
		t.Fatalf("after the run: %+v", got)
	}
	if err := RunAmended(context.Background(), st, p.ID, &recorder{}, amend, nil); err != nil || calls != 1 {
		t.Fatalf("a done plan: %v, amend called %d times; want once in all", err, calls)
	}
}

// TestProgressCountsFromOne: a plan of six steps says "step 1/6" to
// "step 6/6" (it said "step 0/5" to "5/5"), as the table numbers them.
func TestProgressCountsFromOne(t *testing.T) {
	st, p := newPlan(t, 6)
	var lines []string
	say := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	if err := Run(context.Background(), st, p.ID, &recorder{}, say); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 1; i <= 6; i++ {
		want = append(want, fmt.Sprintf("step %d/6: step", i))
	}
	if len(lines) > 0 {
		lines = lines[:len(lines)-1] // "plan ... done"
	}
	if !slices.Equal(lines, want) {
		t.Errorf("progress lines %q, want %q", lines, want)
	}
	if n := p.Steps[5].Number(); n != 6 {
		t.Errorf("the last of six steps is number %d", n)
	}
}
