package adopt

import (
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
)

// TestMemberOf: an adopt plan names its member from its payload; one
// written before payloads (its upgrade fields dropped on read) from its
// first step, as it did then; plan show and the condition say so.
func TestMemberOf(t *testing.T) {
	p := &plan.Plan{ID: "adopt-1", Kind: plan.KindAdopt, State: plan.Failed, Steps: []plan.Step{{Member: "etcd-2"}}}
	if err := plan.SetPayload(p, Payload{Member: "etcd-1"}); err != nil {
		t.Fatal(err)
	}
	if memberOf(p) != "etcd-1" || show(p) != "adopt of member etcd-1, failed" || describe(p) != "adopt plan adopt-1 (member etcd-1)" {
		t.Errorf("with a payload: %q, %q, %q", memberOf(p), show(p), describe(p))
	}
	legacy, err := plan.Parse([]byte(`{"id":"adopt-0","kind":"adopt","from":"3.6.16","to":"3.6.16","strategy":"one member","state":"done","steps":[{"index":0,"kind":"adopt-check","member":"etcd-3"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if legacy.Payload != nil || memberOf(legacy) != "etcd-3" || show(legacy) != "adopt of member etcd-3, done" {
		t.Errorf("written before payloads: payload %s, %q, %q", legacy.Payload, memberOf(legacy), show(legacy))
	}
	none := &plan.Plan{ID: "adopt-2", Kind: plan.KindAdopt, State: plan.Pending}
	if show(none) != "adopt, pending" || describe(none) != "adopt plan adopt-2" {
		t.Errorf("without a member: %q, %q", show(none), describe(none))
	}
}
