package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kubeupgrade"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// allKinds is every plan kind Steward runs.
var allKinds = []plan.Kind{plan.KindUpgrade, plan.KindRollback, plan.KindCARotation, plan.KindCARotationRollback,
	plan.KindAdopt, plan.KindAdoptUndo, plan.KindCertsTakeOver, kubeupgrade.KindKubeUpgrade, kubeupgrade.KindKubeRollback}

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

// withPayload returns p with payload v recorded.
func withPayload(t *testing.T, p *plan.Plan, v any) *plan.Plan {
	t.Helper()
	if err := plan.SetPayload(p, v); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanKindConditions: the condition that reports each kind (an
// adoption or a CA rotation is no upgrade in progress), and the words it
// names the plan with, from the kind's payload; an adopt plan written
// before payloads names its first step's member.
func TestPlanKindConditions(t *testing.T) {
	p := func(k plan.Kind) *plan.Plan { return &plan.Plan{ID: "P", Kind: k} }
	versions := upgrade.Payload{From: "3.5.0", To: "3.6.0", Strategy: "rolling"}
	for _, tc := range []struct {
		p         *plan.Plan
		what, typ string
	}{
		{withPayload(t, p(plan.KindUpgrade), versions), "upgrade plan P (etcd 3.5.0 to 3.6.0)", plan.CondUpgradeInProgress},
		{withPayload(t, p(plan.KindUpgrade), upgrade.Payload{From: "3.6.0", To: "3.5.0"}), "downgrade plan P (etcd 3.6.0 to 3.5.0)", plan.CondUpgradeInProgress},
		{withPayload(t, p(plan.KindRollback), versions), "rollback plan P (etcd 3.5.0 to 3.6.0)", plan.CondUpgradeInProgress},
		{p(plan.KindCARotation), "ca-rotation plan P", plan.CondCertificateRotationInProgress},
		{p(plan.KindCARotationRollback), "ca-rotation-rollback plan P", plan.CondCertificateRotationInProgress},
		{p(plan.KindCertsTakeOver), "certs-take-over plan P", plan.CondCertificateRotationInProgress},
		{withPayload(t, p(plan.KindAdopt), adopt.Payload{Member: "etcd-1"}), "adopt plan P (member etcd-1)", plan.CondAdoptionInProgress},
		{&plan.Plan{ID: "P", Kind: plan.KindAdopt, Steps: []plan.Step{{Member: "etcd-2"}}}, "adopt plan P (member etcd-2)", plan.CondAdoptionInProgress},
		{withPayload(t, p(plan.KindAdoptUndo), adopt.Payload{Member: "etcd-1"}), "adopt-undo plan P (member etcd-1)", plan.CondAdoptionInProgress},
		{withPayload(t, p(kubeupgrade.KindKubeUpgrade), kubeupgrade.Payload{To: "v1.36.3"}), "kube-upgrade plan P (Kubernetes to v1.36.3, complete)", kubeupgrade.CondKubeUpgradeInProgress},
		{withPayload(t, p(kubeupgrade.KindKubeRollback), kubeupgrade.RollbackPayload{Of: "U", From: "v1.36.3", To: []string{"v1.35.4"}}), "kube-rollback plan P (Kubernetes v1.36.3 back to v1.35.4, rollback-complete, 0/0 components rolled back)", kubeupgrade.CondKubeUpgradeInProgress},
	} {
		what, typ, ok := cluster.PlanKinds.Describe(tc.p)
		if !ok || typ != tc.typ || what != tc.what {
			t.Errorf("%s: condition %q (%v) saying %q; want %s saying %q", tc.p.Kind, typ, ok, what, tc.typ, tc.what)
		}
	}
	want := []string{plan.CondAdoptionInProgress, plan.CondCertificateRotationInProgress, kubeupgrade.CondKubeUpgradeInProgress, plan.CondUpgradeInProgress}
	if got := cluster.PlanKinds.Conditions(); !slices.Equal(got, want) {
		t.Errorf("conditions %v, want %v", got, want)
	}
	if status.CondUpgradeInProgress != plan.CondUpgradeInProgress {
		t.Errorf("status.CondUpgradeInProgress is %q", status.CondUpgradeInProgress)
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

// TestPrintPlanKinds: plan show's first line for every kind: an upgrade's
// and a rollback's as it was before payloads (the kind, versions,
// strategy, state), the others from their payload (or the kind and state
// alone); a plan of an unknown kind is an error, in every format.
func TestPrintPlanKinds(t *testing.T) {
	failed := func(k plan.Kind) *plan.Plan { return &plan.Plan{ID: "P", Kind: k, State: plan.Failed, Error: "boom"} }
	versions := upgrade.Payload{From: "3.6.16", To: "3.6.16", Strategy: "rolling"}
	for _, tc := range []struct {
		p    *plan.Plan
		want string
	}{
		{withPayload(t, failed(plan.KindUpgrade), versions), "upgrade 3.6.16 -> 3.6.16, strategy rolling, failed"},
		{withPayload(t, failed(plan.KindUpgrade), upgrade.Payload{From: "3.6.16", To: "3.5.35", Strategy: "rolling"}), "downgrade 3.6.16 -> 3.5.35, strategy rolling, failed"},
		{withPayload(t, failed(plan.KindRollback), versions), "rollback 3.6.16 -> 3.6.16, strategy rolling, failed"},
		{failed(plan.KindUpgrade), "upgrade, failed (plan P records no versions)"},
		{withPayload(t, failed(plan.KindCARotation), carotate.Payload{OldCA: "0123456789abcdef0123456789abcdef"}), "ca-rotation of the CA sha256:0123456789abcdef, failed"},
		{withPayload(t, failed(plan.KindCARotationRollback), carotate.Payload{OldCA: "0123456789abcdef0123456789abcdef"}), "ca-rotation-rollback back to the CA sha256:0123456789abcdef, failed"},
		{failed(plan.KindCARotation), "ca-rotation, failed"},
		{failed(plan.KindCertsTakeOver), "certs-take-over, failed"},
		{withPayload(t, failed(plan.KindAdopt), adopt.Payload{Member: "etcd-1"}), "adopt of member etcd-1, failed"},
		{withPayload(t, failed(plan.KindAdoptUndo), adopt.Payload{Member: "etcd-1"}), "adopt-undo of member etcd-1, failed"},
		{withPayload(t, failed(kubeupgrade.KindKubeRollback), kubeupgrade.RollbackPayload{Of: "U", From: "v1.36.3", To: []string{"v1.35.4"}}), "kube-rollback of U: v1.36.3 back to v1.35.4, rollback-complete"},
	} {
		var b bytes.Buffer
		g := &Globals{Output: "table"}
		if err := g.PrintPlan(&b, tc.p); err != nil {
			t.Fatal(err)
		}
		want := "plan P: " + tc.want + "\nerror: boom\n"
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("%s: plan show printed %q, want it to begin %q", tc.p.Kind, b.String(), want)
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

// TestPrintPlanJSON: plan show -o json and -o yaml print an upgrade's and
// a rollback's from, to and strategy at the top level, as before payloads
// (and no payload beside them), which read back as the payload; another
// kind's record prints its payload as it is, without upgrade fields.
func TestPrintPlanJSON(t *testing.T) {
	for _, k := range []plan.Kind{plan.KindUpgrade, plan.KindRollback} {
		p := withPayload(t, &plan.Plan{ID: "P", Kind: k, State: plan.Running, Values: map[string]string{"backup": "b-1"}},
			upgrade.Payload{From: "3.5.35", To: "3.6.16", Strategy: "offline"})
		var b bytes.Buffer
		if err := (&Globals{Output: "json"}).PrintPlan(&b, p); err != nil {
			t.Fatal(err)
		}
		var top map[string]any
		if err := json.Unmarshal(b.Bytes(), &top); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for key := range top {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		// The keys plan show -o json printed before payloads, for such a plan.
		if want := "createdAt from id kind state steps strategy to updatedAt values"; strings.Join(keys, " ") != want {
			t.Errorf("%s -o json: keys %v, want %s", k, keys, want)
		}
		if top["from"] != "3.5.35" || top["to"] != "3.6.16" || top["strategy"] != "offline" || top["id"] != "P" {
			t.Errorf("%s -o json: %s", k, b.String())
		}
		back, err := plan.Parse(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if v, err := upgrade.PayloadOf(back); err != nil || v != (upgrade.Payload{From: "3.5.35", To: "3.6.16", Strategy: "offline"}) {
			t.Errorf("%s -o json read back: %+v, %v", k, v, err)
		}
		b.Reset()
		if err := (&Globals{Output: "yaml"}).PrintPlan(&b, p); err != nil {
			t.Fatal(err)
		}
		for _, line := range []string{"from: 3.5.35\n", "to: 3.6.16\n", "strategy: offline\n", "id: P\n"} {
			if !strings.Contains(b.String(), line) {
				t.Errorf("%s -o yaml lacks %q:\n%s", k, line, b.String())
			}
		}
		if strings.Contains(b.String(), "payload") {
			t.Errorf("%s -o yaml prints a payload:\n%s", k, b.String())
		}
	}
	var b bytes.Buffer
	p := withPayload(t, &plan.Plan{ID: "P", Kind: plan.KindAdopt, State: plan.Done}, adopt.Payload{Member: "etcd-1"})
	if err := (&Globals{Output: "json"}).PrintPlan(&b, p); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	var payload bytes.Buffer
	if err := json.Compact(&payload, top["payload"]); err != nil || payload.String() != `{"member":"etcd-1"}` || top["from"] != nil || top["strategy"] != nil {
		t.Errorf("adopt -o json: %s", b.String())
	}
}
