package status

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// FuzzReadAutoRecovery: the automatic recovery's state file, read from
// disk by `steward status`: an error or a state that, written again and
// read back, is the same.
func FuzzReadAutoRecovery(f *testing.F) {
	at := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	seed := f.TempDir()
	if err := WriteAutoRecovery(seed, &AutoRecoveryState{Decision: "act", Reason: "r", DecidedAt: at, LostSince: at,
		LastAction: &AutoRecoveryAction{Action: "reseed", Reason: "r", Started: at, Finished: at, Result: "success", Message: "m"},
		Actions:    []AutoRecoveryCount{{Action: "reseed", Reason: ReasonQuorumLost, Result: "success", Count: 2}, {Action: "restore", Result: "failure", Count: 1}}, Recorder: "0123456789abcdef"}); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(AutoRecoveryStatePath(seed))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"decision":"wait"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`{"actions":[{"action":"restore","result":"success","count":-1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(AutoRecoveryStatePath(dir), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := ReadAutoRecovery(dir)
		if err != nil {
			return
		}
		if s == nil {
			t.Fatal("a file that exists read as none")
		}
		_ = s.note(false)
		for _, a := range s.Actions {
			if a.Count < 0 {
				t.Fatalf("a negative count was read: %+v", a)
			}
		}
		if err := WriteAutoRecovery(dir, s); err != nil {
			t.Fatal(err)
		}
		again, err := ReadAutoRecovery(dir)
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(s)) {
			t.Fatalf("round trip: %+v -> %+v (%v)", s, again, err)
		}
	})
}

// normalize drops monotonic clock readings and locations for comparison.
func normalize(s *AutoRecoveryState) AutoRecoveryState {
	c := *s
	c.DecidedAt, c.LostSince = c.DecidedAt.UTC(), c.LostSince.UTC()
	if s.LastAction != nil {
		a := *s.LastAction
		a.Started, a.Finished = a.Started.UTC(), a.Finished.UTC()
		c.LastAction = &a
	}
	return c
}
