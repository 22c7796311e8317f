package adopt

import (
	"fmt"

	"github.com/etcd-steward/steward/pkg/plan"
)

// Payload is what an adopt or adopt-undo plan records about itself
// (plan.Plan's Payload): the member it hands over or gives back. What the
// steps need to give it back (how it ran, its unit, its pid) stays in the
// plan's values, which the undo copies. A certs-take-over plan records
// nothing.
type Payload struct {
	Member string `json:"member"`
}

// memberOf is the member an adopt or adopt-undo plan is about: its
// payload's, or, in a plan written before payloads existed (or whose
// payload is unreadable), its first step's.
func memberOf(p *plan.Plan) string {
	if v, err := plan.PayloadOf[Payload](p); err == nil && v.Member != "" {
		return v.Member
	}
	if len(p.Steps) > 0 {
		return p.Steps[0].Member
	}
	return ""
}

// describe names an adopt or adopt-undo plan in its condition: "KIND plan
// ID (member NAME)".
func describe(p *plan.Plan) string {
	if m := memberOf(p); m != "" {
		return fmt.Sprintf("%s plan %s (member %s)", p.Kind, p.ID, m)
	}
	return plan.DescribeKind(p)
}

// show is the summary `plan show` prints of an adopt or adopt-undo plan:
// "KIND of member NAME, STATE".
func show(p *plan.Plan) string {
	if m := memberOf(p); m != "" {
		return fmt.Sprintf("%s of member %s, %s", p.Kind, m, p.State)
	}
	return plan.ShowState(p)
}
