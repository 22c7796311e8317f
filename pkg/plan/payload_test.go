package plan

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// versions is a payload of the shape pkg/upgrade records (its own test
// reads the same fixtures into its own type).
type versions struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Strategy string `json:"strategy"`
}

// TestPayloadRoundTrip: what a kind records, it reads back; a plan that
// records nothing reads as the zero payload; a payload of another shape
// is an error naming the plan.
func TestPayloadRoundTrip(t *testing.T) {
	p := &Plan{ID: "u-1", Kind: KindUpgrade}
	if v, err := PayloadOf[versions](p); err != nil || v != (versions{}) {
		t.Fatalf("PayloadOf without a payload = %+v, %v", v, err)
	}
	if err := SetPayload(p, versions{"3.5.35", "3.6.16", "rolling"}); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := PayloadOf[versions](q); err != nil || v != (versions{"3.5.35", "3.6.16", "rolling"}) {
		t.Fatalf("PayloadOf after a round trip = %+v, %v", v, err)
	}
	if err := SetPayload(p, func() {}); err == nil || !strings.Contains(err.Error(), "plan u-1") {
		t.Errorf("SetPayload(func) = %v", err)
	}
	p.Payload = json.RawMessage(`{"from":5}`)
	if _, err := PayloadOf[versions](p); err == nil || !strings.Contains(err.Error(), "plan u-1") {
		t.Errorf("PayloadOf(another shape) = %v, want an error naming the plan", err)
	}
}

// TestParseRefuses: a record whose payload is not a JSON object is
// refused, naming the plan; a null payload is none.
func TestParseRefuses(t *testing.T) {
	for _, payload := range []string{`5`, `"x"`, `[1]`, `true`} {
		_, err := Parse([]byte(`{"id":"u-1","kind":"upgrade","payload":` + payload + `}`))
		if err == nil || err.Error() != "plan u-1: its payload is not a JSON object" {
			t.Errorf("payload %s: %v", payload, err)
		}
	}
	p, err := Parse([]byte(`{"id":"u-1","kind":"upgrade","payload":null}`))
	if err != nil || p.Payload != nil {
		t.Errorf("payload null: %+v, %v", p, err)
	}
}

// TestParseLegacyRecords: the records Steward wrote before payloads
// (testdata/v0) read with an upgrade's top-level fields as its payload,
// and without them for a CA rotation, to which they meant nothing; saved
// again, neither keeps them at the top level.
func TestParseLegacyRecords(t *testing.T) {
	for _, tc := range []struct {
		file    string
		payload string
	}{
		{"upgrade.json", `{"from":"3.5.35","to":"3.6.16","strategy":"rolling"}`},
		{"ca-rotation.json", ""},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "v0", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if string(p.Payload) != tc.payload {
			t.Errorf("%s: payload %s, want %s", tc.file, p.Payload, tc.payload)
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(again, &top); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"from", "to", "strategy"} {
			if _, ok := top[k]; ok {
				t.Errorf("%s saved again keeps %q at the top level: %s", tc.file, k, again)
			}
		}
		q, err := Parse(again)
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Errorf("%s: read again %+v, %v; want %+v", tc.file, q, err, p)
		}
	}
}

// TestResumeLegacyStore: a plan store written before payloads (a failed
// upgrade, latest, after a CA rotation) opens, and its failed plan
// resumes from its failed step to the end; saved, the record carries the
// payload and no top-level upgrade fields.
func TestResumeLegacyStore(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "v0", DBName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DBName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	st := OpenStore(dir)
	all, err := st.List()
	if err != nil || len(all) != 2 {
		t.Fatalf("List = %d plans, %v", len(all), err)
	}
	p, err := st.Latest()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := PayloadOf[versions](p); err != nil || v != (versions{"3.5.35", "3.6.16", "rolling"}) || p.Value("backup") != "full-20261120T100001Z" {
		t.Fatalf("the legacy upgrade reads as %+v (%v), values %v", v, err, p.Values)
	}
	ex := &recorder{}
	if err := Run(t.Context(), st, p.ID, ex, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ex.ran, []int{3, 4, 5}) {
		t.Errorf("resumed steps %v, want 3, 4, 5 (from the failed one)", ex.ran)
	}
	db, err := bolt.Open(filepath.Join(dir, DBName), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var raw []byte
	_ = db.View(func(tx *bolt.Tx) error {
		raw = bytes.Clone(tx.Bucket(bucketPlans).Get([]byte(p.ID)))
		return nil
	})
	if !bytes.Contains(raw, []byte(`"payload":{"from":"3.5.35","to":"3.6.16","strategy":"rolling"}`)) || bytes.Contains(raw, []byte(`"strategy":"rolling","state"`)) {
		t.Errorf("the resumed plan saved as %s", raw)
	}
	if got, err := st.Get(p.ID); err != nil || got.State != Done {
		t.Errorf("after the resume: %+v, %v", got, err)
	}
}

// FuzzParse: a plan record read from disk or from another coordinator's
// copy (Parse, which the store and plan.Plan's UnmarshalJSON share) is an
// error or a plan whose payload is absent or a JSON object, and that
// reads back the same once written again.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"upgrade.json", "ca-rotation.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "v0", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	p := &Plan{ID: "adopt-1", Kind: KindAdopt, State: Running, CreatedAt: time.Unix(1, 0).UTC(),
		Steps: []Step{{Index: 0, Kind: "k", Member: "etcd-1", State: Done}}, Values: map[string]string{"a": "b"}}
	if err := SetPayload(p, map[string]string{"member": "etcd-1"}); err != nil {
		f.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"kind":"rollback","from":"3.6.16","payload":null}`))
	f.Add([]byte(`{"kind":"upgrade","payload":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		if len(p.Payload) > 0 {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(p.Payload, &m); err != nil {
				t.Fatalf("accepted a payload that is not a JSON object: %s", p.Payload)
			}
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("an accepted plan does not encode: %v", err)
		}
		q, err := Parse(again)
		if err != nil {
			t.Fatalf("an accepted plan, written again, is refused: %v\n%s", err, again)
		}
		third, err := json.Marshal(q)
		if err != nil || !bytes.Equal(again, third) {
			t.Fatalf("a plan read back differs:\n%s\n%s", again, third)
		}
	})
}
