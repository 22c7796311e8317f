package cli

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
)

// allKinds is every plan kind Steward runs.
var allKinds = []plan.Kind{plan.KindUpgrade, plan.KindRollback, plan.KindCARotation, plan.KindCARotationRollback,
	plan.KindAdopt, plan.KindAdoptUndo, plan.KindCertsTakeOver}

// TestPlanKindsRegistered: with the packages plankinds.go links, every
// kind is registered, and only these (Register panics on a second
// registration of one).
func TestPlanKindsRegistered(t *testing.T) {
	want := slices.Clone(allKinds)
	slices.Sort(want)
	if got := cluster.PlanKinds.Kinds(); !slices.Equal(got, want) {
		t.Fatalf("registered kinds %v, want %v", got, want)
	}
	for _, k := range allKinds {
		s, err := cluster.PlanKinds.Lookup(k)
		if err != nil {
			t.Fatal(err)
		}
		if s.Kind != k || s.Resume == nil {
			t.Errorf("kind %s: spec %+v", k, s)
		}
		// Only adoptions run on an attached cluster.
		if want := k == plan.KindAdopt || k == plan.KindAdoptUndo; s.Attached != want {
			t.Errorf("kind %s: Attached %v, want %v", k, s.Attached, want)
		}
	}
}

// TestPlanKindConditions: the condition that reports each kind, and the
// words it names the plan with.
func TestPlanKindConditions(t *testing.T) {
	for _, tc := range []struct {
		kind plan.Kind
		what string
	}{
		{plan.KindUpgrade, "upgrade plan P (etcd 3.5.0 to 3.6.0)"},
		{plan.KindRollback, "rollback plan P (etcd 3.5.0 to 3.6.0)"},
		{plan.KindCARotation, "ca-rotation plan P"},
		{plan.KindCARotationRollback, "ca-rotation-rollback plan P"},
		{plan.KindAdopt, "adopt plan P (member etcd-1)"},
		{plan.KindAdoptUndo, "adopt-undo plan P (member etcd-1)"},
		{plan.KindCertsTakeOver, "certs-take-over plan P"},
	} {
		p := &plan.Plan{ID: "P", Kind: tc.kind, From: "3.5.0", To: "3.6.0", Steps: []plan.Step{{Member: "etcd-1"}}}
		what, typ, ok := cluster.PlanKinds.Describe(p)
		if !ok || typ != status.CondUpgradeInProgress || what != tc.what {
			t.Errorf("%s: condition %q (%v) saying %q; want %s saying %q", tc.kind, typ, ok, what, status.CondUpgradeInProgress, tc.what)
		}
	}
	if got := cluster.PlanKinds.Conditions(); !slices.Equal(got, []string{status.CondUpgradeInProgress}) {
		t.Errorf("conditions %v", got)
	}
}

// TestPlanKindAdmissions: each kind's admission against the latest plan,
// with the refusals' words as the commands print them (the library's
// typed refusal, the command's advice added: PlanHint, CARollbackHint).
func TestPlanKindAdmissions(t *testing.T) {
	const std = ": `steward plan resume` finishes it, `steward plan abort` stops it"
	latest := func(k plan.Kind, s plan.State) *plan.Plan {
		p := &plan.Plan{ID: string(k) + "-1", Kind: k, State: s, CreatedAt: time.Unix(1, 0),
			Steps: []plan.Step{{Index: 0, Description: "check", State: plan.Done}, {Index: 1, Description: "swap etcd-1", State: s}}}
		return p
	}
	for _, tc := range []struct {
		kind   plan.Kind
		latest *plan.Plan
		want   string // "": admitted
	}{
		{plan.KindUpgrade, nil, ""},
		{plan.KindUpgrade, latest(plan.KindUpgrade, plan.Done), ""},
		{plan.KindUpgrade, latest(plan.KindUpgrade, plan.Failed), "upgrade plan upgrade-1 is failed at step 2 (swap etcd-1): `steward plan resume` finishes it, `steward plan abort` stops it, `steward rollback` undoes it"},
		{plan.KindUpgrade, latest(plan.KindAdopt, plan.Running), "adopt plan adopt-1 is running at step 2 (swap etcd-1): `steward plan resume` finishes it, `steward plan abort` stops it, `steward rollback` undoes it"},
		{plan.KindRollback, nil, plan.ErrNoPlan.Error()},
		{plan.KindRollback, latest(plan.KindUpgrade, plan.Failed), ""},
		{plan.KindRollback, latest(plan.KindAdopt, plan.Failed), ""},
		{plan.KindRollback, latest(plan.KindCARotation, plan.Failed), "ca-rotation plan ca-rotation-1 is failed" + std},
		{plan.KindRollback, latest(plan.KindCertsTakeOver, plan.Pending), "certs-take-over plan certs-take-over-1 is pending" + std},
		{plan.KindRollback, latest(plan.KindRollback, plan.Failed), "rollback rollback-1 is failed: `steward plan resume` finishes it"},
		{plan.KindRollback, latest(plan.KindRollback, plan.Done), ""},
		{plan.KindCARotation, nil, ""},
		{plan.KindCARotation, latest(plan.KindUpgrade, plan.Failed), "upgrade plan upgrade-1 is failed" + std},
		{plan.KindCARotation, latest(plan.KindCARotation, plan.Aborted), ""},
		{plan.KindCARotationRollback, nil, ""},
		{plan.KindCARotationRollback, latest(plan.KindCARotation, plan.Failed), ""},
		{plan.KindCARotationRollback, latest(plan.KindUpgrade, plan.Failed), ""},
		{plan.KindAdopt, latest(plan.KindAdopt, plan.Failed), "adopt plan adopt-1 is failed" + std},
		{plan.KindAdopt, latest(plan.KindAdopt, plan.Done), ""},
		{plan.KindAdoptUndo, latest(plan.KindAdopt, plan.Failed), ""},
		{plan.KindAdoptUndo, latest(plan.KindAdoptUndo, plan.Failed), "adopt-undo plan adopt-undo-1 is failed" + std},
		{plan.KindAdoptUndo, latest(plan.KindUpgrade, plan.Running), "upgrade plan upgrade-1 is running" + std},
		{plan.KindCertsTakeOver, nil, ""},
		{plan.KindCertsTakeOver, latest(plan.KindAdopt, plan.Pending), "adopt plan adopt-1 is pending" + std},
	} {
		name := string(tc.kind) + " after none"
		if tc.latest != nil {
			name = string(tc.kind) + " after " + tc.latest.ID + " " + string(tc.latest.State)
		}
		t.Run(name, func(t *testing.T) {
			st := plan.OpenStore(t.TempDir())
			if tc.latest != nil {
				if err := st.Save(t.Context(), tc.latest); err != nil {
					t.Fatal(err)
				}
			}
			s, err := cluster.PlanKinds.Lookup(tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			_, err = plan.Admit(st, s.Admission)
			if err != nil && strings.Contains(err.Error(), "`steward ") {
				t.Errorf("the library's refusal names a command: %q", err)
			}
			err = PlanHint(err)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("admitted; want %q", tc.want)
			case tc.want != "" && err.Error() != tc.want:
				t.Errorf("refused with %q\nwant           %q", err, tc.want)
			}
		})
	}
	// The runner's lock refuses every start; a CA rotation's rollback
	// says how to get past it.
	st := plan.OpenStore(t.TempDir())
	l, err := st.TryLock()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for _, k := range allKinds {
		s, _ := cluster.PlanKinds.Lookup(k)
		_, err := plan.Admit(st, s.Admission)
		if !errors.Is(err, plan.ErrLocked) {
			t.Errorf("%s under the runner's lock: %v", k, err)
		}
		if k == plan.KindCARotationRollback && !strings.HasSuffix(CARollbackHint(err).Error(), ": `steward plan abort` stops it after its step, then `steward rollback` rolls a CA rotation back") {
			t.Errorf("%s under the runner's lock: %q", k, err)
		}
	}
}

// TestPrintPlanKinds: plan show's first line is as it was for every kind
// (the kind, versions, strategy, state); a plan of an unknown kind is an
// error, in every format.
func TestPrintPlanKinds(t *testing.T) {
	for _, k := range allKinds {
		var b bytes.Buffer
		g := &Globals{Output: "table"}
		p := &plan.Plan{ID: "P", Kind: k, From: "3.6.16", To: "3.6.16", Strategy: "rolling", State: plan.Failed, Error: "boom"}
		if err := g.PrintPlan(&b, p); err != nil {
			t.Fatal(err)
		}
		want := "plan P: " + string(k) + " 3.6.16 -> 3.6.16, strategy rolling, failed\nerror: boom\n"
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("%s: plan show printed %q, want it to begin %q", k, b.String(), want)
		}
	}
	for _, out := range []string{"table", "json"} {
		g := &Globals{Output: out}
		err := g.PrintPlan(&bytes.Buffer{}, &plan.Plan{ID: "P", Kind: "no-such-kind"})
		if !errors.Is(err, plan.ErrUnknownKind) {
			t.Errorf("-o %s of an unknown kind: %v", out, err)
		}
	}
}
