package upgrade

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-steward/steward/pkg/plan"
)

// Payload is what an upgrade or a rollback plan records about itself
// (plan.Plan's Payload, through plan.SetPayload and plan.PayloadOf). A
// record written before payloads existed kept these fields at its top
// level; package plan reads them as this payload (its testdata/v0, which
// TestLegacyPayload reads too).
type Payload struct {
	// From and To are the cluster's etcd version before and after.
	From string `json:"from"`
	To   string `json:"to"`
	// Strategy is how the plan goes: rolling, offline or restore.
	Strategy string `json:"strategy"`
}

// PayloadOf returns the payload of upgrade or rollback plan p; an error
// names a plan whose payload is not one, or that records none.
func PayloadOf(p *plan.Plan) (Payload, error) {
	v, err := plan.PayloadOf[Payload](p)
	if err == nil && v == (Payload{}) {
		err = fmt.Errorf("plan %s records no versions", p.ID)
	}
	return v, err
}

// view is what `steward plan show -o json|yaml` prints of an upgrade or a
// rollback: the record with the payload's fields at its top level, as
// they were before payloads existed (and without the payload itself,
// which those fields are).
type view struct {
	*plan.Plan
	From     string          `json:"from"`
	To       string          `json:"to"`
	Strategy string          `json:"strategy"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

func viewOf(p *plan.Plan) any {
	v, _ := plan.PayloadOf[Payload](p) // shown as it is, even unreadable
	return view{Plan: p, From: v.From, To: v.To, Strategy: v.Strategy}
}

// show is the summary `plan show` prints of an upgrade or a rollback:
// "KIND FROM -> TO, strategy STRATEGY, STATE".
func show(p *plan.Plan) string {
	v, err := PayloadOf(p)
	if err != nil {
		return fmt.Sprintf("%s, %s (%v)", p.Kind, p.State, err)
	}
	return fmt.Sprintf("%s %s -> %s, strategy %s, %s", versionsWord(p.Kind, v), v.From, v.To, v.Strategy, p.State)
}

// describe names an upgrade or a rollback in its condition: "KIND plan ID
// (etcd FROM to TO)".
func describe(p *plan.Plan) string {
	v, err := PayloadOf(p)
	if err != nil {
		return plan.DescribeKind(p)
	}
	return fmt.Sprintf("%s plan %s (etcd %s to %s)", versionsWord(p.Kind, v), p.ID, v.From, v.To)
}

// versionsWord is what a plan that changes etcd's version does: its kind,
// except an upgrade plan to an older version (`upgrade plan --to 3.5.35`
// on 3.6), which is a downgrade, as its steps say.
func versionsWord(k plan.Kind, v Payload) string {
	if k == plan.KindUpgrade && olderVersion(v.To, v.From) {
		return "downgrade"
	}
	return string(k)
}

// olderVersion reports whether version a (3.MINOR.PATCH) is older than b;
// false when either does not parse.
func olderVersion(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	if pa == nil || pb == nil {
		return false
	}
	return slices.Compare(pa, pb) < 0
}

func versionParts(v string) []int {
	var out []int
	for f := range strings.SplitSeq(strings.TrimPrefix(v, "v"), ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}
