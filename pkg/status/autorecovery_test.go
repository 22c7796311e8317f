package status

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestAutoRecoveryState: the state file round-trips, and the Ready
// message carries the decision only while quorum is lost, the last
// action always.
func TestAutoRecoveryState(t *testing.T) {
	dir := t.TempDir()
	if s, err := ReadAutoRecovery(dir); s != nil || err != nil {
		t.Fatalf("no file: %v %v", s, err)
	}
	at := time.Date(2026, 11, 27, 22, 0, 0, 0, time.UTC)
	s := &AutoRecoveryState{Decision: "wait", Reason: "the agents of etcd-1 (agent h1) do not answer", DecidedAt: at}
	if err := WriteAutoRecovery(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAutoRecovery(dir)
	if err != nil || got.Reason != s.Reason || !got.DecidedAt.Equal(at) {
		t.Fatalf("read back %+v %v", got, err)
	}
	if n := got.note(true); n != "" {
		t.Errorf("quorate, no action: %q", n)
	}
	if n := got.note(false); !strings.Contains(n, "automatic recovery (wait at 2026-11-27T22:00:00Z): the agents of etcd-1") {
		t.Errorf("quorum lost: %q", n)
	}
	got.LastAction = &AutoRecoveryAction{Action: "reseed", Result: "success", Started: at, Reason: "quorum lost everywhere"}
	if n := got.note(true); !strings.Contains(n, "last automatic recovery: reseed, success, started 2026-11-27T22:00:00Z (quorum lost everywhere)") {
		t.Errorf("after an action: %q", n)
	}
}

// TestAutoRecoveryCounts: CountAction counts each action and result
// apart ("none" for an empty action), the counts survive a write and a
// read, and a damaged count (negative) is refused with the file named.
func TestAutoRecoveryCounts(t *testing.T) {
	dir := t.TempDir()
	s := &AutoRecoveryState{Decision: "none"}
	s.CountAction("restore", "success")
	s.CountAction("restore", "success")
	s.CountAction("restore", "failure")
	s.CountAction("", "success")
	if err := WriteAutoRecovery(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAutoRecovery(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []AutoRecoveryCount{{"restore", "success", 2}, {"restore", "failure", 1}, {"none", "success", 1}}
	if fmt.Sprint(got.Actions) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", got.Actions, want)
	}
	if err := os.WriteFile(AutoRecoveryStatePath(dir), []byte(`{"actions":[{"action":"restore","result":"success","count":-3}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAutoRecovery(dir); err == nil || !strings.Contains(err.Error(), AutoRecoveryStatePath(dir)) || !strings.Contains(err.Error(), "count of 0 or more") {
		t.Errorf("a negative count: %v", err)
	}
}
