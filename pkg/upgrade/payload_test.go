package upgrade

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
)

// TestLegacyPayload: an upgrade record written before payloads (package
// plan's testdata/v0, from ecff169) reads with its versions and strategy
// as this kind's payload, plan show summarises it as it did, and plan
// show -o json prints exactly the record it printed then.
func TestLegacyPayload(t *testing.T) {
	b, err := os.ReadFile("../plan/testdata/v0/upgrade.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := PayloadOf(p)
	if err != nil || v != (Payload{From: "3.5.35", To: "3.6.16", Strategy: "rolling"}) {
		t.Fatalf("PayloadOf = %+v, %v", v, err)
	}
	if got := show(p); got != "upgrade 3.5.35 -> 3.6.16, strategy rolling, failed" {
		t.Errorf("show = %q", got)
	}
	if got := describe(p); got != "upgrade plan upgrade-20261120T100000Z (etcd 3.5.35 to 3.6.16)" {
		t.Errorf("describe = %q", got)
	}
	out, err := json.Marshal(viewOf(p))
	if err != nil {
		t.Fatal(err)
	}
	var was, now map[string]any
	if err := json.Unmarshal(b, &was); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &now); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(was, now) {
		t.Errorf("plan show -o json of the record printed\n%s\nwas\n%s", out, b)
	}
}

// TestShowDowngrade: an upgrade plan to an older version is shown as the
// downgrade it is (its steps say downgrade; the title said upgrade); a
// rollback stays a rollback.
func TestShowDowngrade(t *testing.T) {
	mk := func(k plan.Kind, from, to string) *plan.Plan {
		p := &plan.Plan{ID: "u-1", Kind: k, State: plan.Pending}
		if err := plan.SetPayload(p, Payload{From: from, To: to, Strategy: "rolling"}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		p          *plan.Plan
		show, desc string
	}{
		{mk(plan.KindUpgrade, "3.6.16", "3.5.35"), "downgrade 3.6.16 -> 3.5.35", "downgrade plan u-1"},
		{mk(plan.KindUpgrade, "3.6.16", "3.10.0"), "upgrade 3.6.16 -> 3.10.0", "upgrade plan u-1"},
		{mk(plan.KindRollback, "3.7.3", "3.6.16"), "rollback 3.7.3 -> 3.6.16", "rollback plan u-1"},
	} {
		if got := show(tc.p); !strings.HasPrefix(got, tc.show) {
			t.Errorf("show = %q, want it to begin %q", got, tc.show)
		}
		if got := describe(tc.p); !strings.HasPrefix(got, tc.desc) {
			t.Errorf("describe = %q, want it to begin %q", got, tc.desc)
		}
	}
}

// TestPayloadOfNone: a plan that records no versions is an error naming
// it, which the steps that need the versions fail with, and which plan
// show and the condition word without failing.
func TestPayloadOfNone(t *testing.T) {
	p := &plan.Plan{ID: "u-1", Kind: plan.KindUpgrade, State: plan.Failed}
	if _, err := PayloadOf(p); err == nil || err.Error() != "plan u-1 records no versions" {
		t.Errorf("PayloadOf = %v", err)
	}
	if got := describe(p); got != "upgrade plan u-1" {
		t.Errorf("describe = %q", got)
	}
	if got := show(p); got != "upgrade, failed (plan u-1 records no versions)" {
		t.Errorf("show = %q", got)
	}
}
