package handover

import (
	"encoding/json"
	"testing"
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
