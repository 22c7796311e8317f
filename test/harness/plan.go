package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// LatestPlan returns the latest plan (`steward plan show -o json`), parsed.
func LatestPlan(t *testing.T, e *Env) plan.Plan {
	t.Helper()
	var p plan.Plan
	if err := json.Unmarshal([]byte(e.MustRun("plan", "show", "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// ReadPlan is LatestPlan for polling: an error while no plan can be read.
func ReadPlan(e *Env) (plan.Plan, error) {
	var p plan.Plan
	so, se, err := e.Run("plan", "show", "-o", "json")
	if err != nil {
		return p, fmt.Errorf("steward plan show: %v: %s", err, strings.TrimSpace(se))
	}
	if err := json.Unmarshal([]byte(so), &p); err != nil {
		return p, fmt.Errorf("parse the plan: %v\n%s", err, so)
	}
	return p, nil
}

// StepStates lists a plan's steps as index:kind:member=state, for a
// failure message.
func StepStates(p plan.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s %s:", p.ID, p.State)
	for _, s := range p.Steps {
		fmt.Fprintf(&b, " %d:%s", s.Index, s.Kind)
		if s.Member != "" {
			fmt.Fprintf(&b, ":%s", s.Member)
		}
		fmt.Fprintf(&b, "=%s", s.State)
	}
	return b.String()
}

// KillAtEveryStep runs `steward ARGS` with the crash point
// plan-step-before:0 armed (STEWARD_CRASHPOINT), then `steward plan resume`
// once with each of plan-step-after:0, plan-step-before:1,
// plan-step-after:1, ... armed, through the last step's after point: every
// step is killed with SIGKILL once after it is recorded running and before
// it acts, and once after it acted and before it is recorded done. Each run
// must die at exactly its point (SIGKILL, "crashpoint: NAME" on stderr),
// leaving the steps before it done, its step running with the attempts so
// far and the later steps pending. A last `steward plan resume` with no
// crash point finishes the plan. Every step then ran exactly three times:
// killed before its action, killed after it, and by the run that went past
// it (the next step's before point, or the last resume).
func KillAtEveryStep(t *testing.T, e *Env, args ...string) {
	t.Helper()
	KillAtEveryStepThen(t, e, nil, args...)
}

// KillAtEveryStepThen is KillAtEveryStep with then (if not nil) called
// after each kill at a step's after point, with the plan as that kill left
// it and the step's index k. then may run the plan further itself (a
// resume made to fail); it returns how many more attempts it made of step
// k, and must leave the steps after k pending (the next run, through the
// next step's before point, re-runs step k once more). A step k then ran
// three times plus what then added.
func KillAtEveryStepThen(t *testing.T, e *Env, then func(p *plan.Plan, k int) int, args ...string) {
	t.Helper()
	KillAtEveryStepWith(t, e, StepKills{Then: then}, args...)
}

// StepKills is what KillAtEveryStepWith does besides the kills at every
// step's before and after points.
type StepKills struct {
	// Within, if not nil, is called after each kill at a step's before
	// point, with the plan as that kill left it and the step's index k:
	// it may run step k further, killed inside its action (RunKilledAt at
	// a point of the step) or made to fail there, and returns how many
	// more attempts it made of step k. It must leave step k not done and
	// the steps after it pending: the next run, killed at k's after
	// point, attempts step k once more.
	Within func(p *plan.Plan, k int) int
	// Then is KillAtEveryStepThen's then: called after each kill at a
	// step's after point.
	Then func(p *plan.Plan, k int) int
}

// RunKilledAt runs `steward ARGS` with the crash point armed and fails
// the test unless the process died there (SIGKILL, that one "crashpoint:"
// line on stderr).
func RunKilledAt(t *testing.T, e *Env, point string, args ...string) {
	t.Helper()
	start := time.Now()
	so, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, args...)
	var ee *exec.ExitError
	killed := errors.As(err, &ee)
	if killed {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	if !killed || strings.Count(se, "crashpoint: ") != 1 || !strings.Contains(se, "crashpoint: "+point+"\n") {
		t.Fatalf("steward %s with %s=%s ended with %v; want it killed by SIGKILL at that point\nstdout: %s\nstderr: %s",
			strings.Join(args, " "), crashpoint.EnvVar, point, err, so, se)
	}
	t.Logf("killed at %s after %s", point, time.Since(start).Round(time.Millisecond))
}

// KillAtEveryStepWith is KillAtEveryStep with k.Within run inside each
// step (after the kill at its before point) and k.Then after each step
// (after the kill at its after point). A step then ran three times plus
// what both added.
func KillAtEveryStepWith(t *testing.T, e *Env, kills StepKills, args ...string) {
	t.Helper()
	store := plan.OpenStore(e.Dir)
	const attemptsEach = 3
	extra := map[int]int{} // attempts Within and Then made, by step index
	// requireSteps fails unless the plan on disk is state, its steps
	// before k done with attemptsEach attempts (plus extra), step k in
	// stepState with attempts, and the steps after k pending and never
	// attempted.
	requireSteps := func(when string, state plan.State, k int, stepState plan.State, attempts int) *plan.Plan {
		t.Helper()
		p, err := store.Latest()
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if p.State != state {
			t.Fatalf("%s: plan %s is %s, want %s", when, p.ID, p.State, state)
		}
		for _, s := range p.Steps {
			want, n := plan.Pending, 0
			switch {
			case s.Index < k:
				want, n = plan.Done, attemptsEach+extra[s.Index]
			case s.Index == k:
				want, n = stepState, attempts
			}
			if s.State != want || s.Attempts != n {
				t.Fatalf("%s: step %d (%s) is %s with %d attempt(s), want %s with %d", when, s.Index, s.Kind, s.State, s.Attempts, want, n)
			}
		}
		return p
	}
	// crash runs steward with one crash point armed and requires that it
	// died there, at step k, which then has the given attempts.
	crash := func(point string, k, attempts int, args ...string) *plan.Plan {
		t.Helper()
		RunKilledAt(t, e, point, args...)
		return requireSteps("killed at "+point, plan.Running, k, plan.Running, attempts)
	}
	before := func(k int) string { return crashpoint.Indexed(crashpoint.PlanStepBefore, k) }
	after := func(k int) string { return crashpoint.Indexed(crashpoint.PlanStepAfter, k) }

	// The first run saves the plan: its step count is known from here on.
	p := crash(before(0), 0, 1, args...)
	n := len(p.Steps)
	if n == 0 {
		t.Fatalf("plan %s has no steps", p.ID)
	}
	resume := []string{"plan", "resume"}
	for k := 0; k < n; k++ {
		if k > 0 {
			p = crash(before(k), k, 1, resume...)
		}
		if kills.Within != nil {
			extra[k] = kills.Within(p, k)
		}
		p = crash(after(k), k, 2+extra[k], resume...)
		if kills.Then != nil {
			extra[k] += kills.Then(p, k)
		}
	}
	e.MustRun(resume...)
	// Every step done (k = n: none is left), each attempted attemptsEach
	// times (plus what Within and Then added).
	p = requireSteps("after the last resume", plan.Done, n, plan.Done, 0)
	t.Logf("plan %s: %d steps, each killed before and after its action and run %d times (more: %v)", p.ID, n, attemptsEach, extra)
}

// UpgradePayload returns an upgrade or a rollback plan's payload: its from, to
// and strategy (`plan show -o json` prints them at the top level, where
// the record read back takes them as its payload).
func UpgradePayload(t *testing.T, p plan.Plan) upgrade.Payload {
	t.Helper()
	v, err := upgrade.PayloadOf(&p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
