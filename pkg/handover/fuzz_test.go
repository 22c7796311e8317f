package handover

import (
	"encoding/json"
	"testing"

	"github.com/etcd-steward/steward/pkg/pki"
)

// FuzzCheckJournal: a recovery journal copy read from the store (after
// its signature verified) is accepted only as a JSON object naming a seed.
func FuzzCheckJournal(f *testing.F) {
	f.Add(`{"seed":"etcd-3","restoredFrom":"20261127T220713.797Z-full-r204","freshBackup":"x","seededAt":"2026-11-27T22:00:00Z"}`)
	f.Add(`{"seed":""}`)
	f.Add(`[]`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, s string) {
		if checkJournal(s) != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("accepted %q, not a JSON object: %v", s, err)
		}
		var j struct {
			Seed string `json:"seed"`
		}
		if err := json.Unmarshal([]byte(s), &j); err != nil || j.Seed == "" {
			t.Fatalf("accepted %q without a seed", s)
		}
	})
}

// FuzzOpen: an envelope read from the store is accepted only when its
// signature verifies over its kind, payload and signed name, and a name
// it signs is the one it was read under; anything else is refused without
// a panic.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	if err := pki.Ensure(dir, "c1", nil); err != nil {
		f.Fatal(err)
	}
	s, err := NewSigner(dir)
	if err != nil {
		f.Fatal(err)
	}
	const name = prefix + "spec/0000000001-0000000000000000001"
	for _, n := range []string{name, "", prefix + "spec/0000000009-0000000000000000009"} {
		b, err := s.seal("spec", n, []byte(`"name: c1\n"`))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"spec","name":"x","payload":"","sig":"","cert":""}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, bound, err := s.open("spec", name, b)
		if err != nil {
			return
		}
		var e envelope
		if json.Unmarshal(b, &e) != nil {
			t.Fatalf("accepted %q, which does not parse", b)
		}
		if bound != (e.Name != "") || (bound && e.Name != name) {
			t.Fatalf("accepted an envelope written as %q read as %q (bound %v)", e.Name, name, bound)
		}
		if string(payload) != string(e.Payload) {
			t.Fatalf("payload %q, envelope's %q", payload, e.Payload)
		}
	})
}
