package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A plan's payload is what its kind records about the whole plan when the
// plan is made: an upgrade's versions and strategy, a member's name for an
// adoption. Each kind's package owns its payload's type and reads and
// writes it only through SetPayload and PayloadOf; this package keeps the
// JSON as it is (Plan.Payload), so the engine, the store and the registry
// never know a kind's fields. Facts that steps record as they run go to
// Values instead.
//
// Invariants, enforced by UnmarshalJSON (every read of a record: the
// store, a coordinator's copy, `plan show -o json` parsed back):
//   - a record's payload is absent or a JSON object;
//   - a record written before payloads existed, which kept an upgrade's
//     fields at its top level (from, to, strategy) for every kind, is read
//     with those fields as the payload of an upgrade or a rollback (the
//     shape of pkg/upgrade's payload, whose test reads such a record), and
//     without them for any other kind, to which they meant nothing.

// SetPayload records v, the payload of p's kind, in p.
func SetPayload(p *Plan, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("plan %s: record its %s payload: %w", p.ID, p.Kind, err)
	}
	p.Payload = b
	return nil
}

// PayloadOf returns p's payload as its kind's type T: the zero T when p
// records none (a kind that records nothing), an error naming the plan
// when the payload is not a T.
func PayloadOf[T any](p *Plan) (T, error) {
	var v T
	if len(p.Payload) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(p.Payload, &v); err != nil {
		return v, fmt.Errorf("plan %s: its payload is not what a %s plan records: %w", p.ID, p.Kind, err)
	}
	return v, nil
}

// Parse reads a plan record (as the store keeps it, or as `steward plan
// show -o json` prints it).
func Parse(b []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// legacyUpgrade is the top level of a record written before payloads
// existed: an upgrade's fields, which every kind filled.
type legacyUpgrade struct {
	From     string `json:"from,omitempty"`
	To       string `json:"to,omitempty"`
	Strategy string `json:"strategy,omitempty"`
}

// UnmarshalJSON reads a plan record, converting one written before
// payloads existed (see the invariants above).
func (p *Plan) UnmarshalJSON(b []byte) error {
	type record Plan // without this method
	var r struct {
		record
		legacyUpgrade
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	q := Plan(r.record)
	if t := bytes.TrimSpace(q.Payload); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		q.Payload = nil
	} else if t[0] != '{' {
		return fmt.Errorf("plan %s: its payload is not a JSON object", q.ID)
	}
	if q.Payload == nil && (q.Kind == KindUpgrade || q.Kind == KindRollback) && r.legacyUpgrade != (legacyUpgrade{}) {
		pb, err := json.Marshal(r.legacyUpgrade)
		if err != nil {
			return err
		}
		q.Payload = pb
	}
	*p = q
	return nil
}
