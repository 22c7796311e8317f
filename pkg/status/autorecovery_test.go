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

// TestAutoRecoveryCounts: CountAction counts each action, reason and
// result apart ("none" for an empty action), the counts survive a write
// and a read, EnsureRecorder gives the file one ID and keeps it, and a
// damaged count (negative) or recorder is refused with the file named.
func TestAutoRecoveryCounts(t *testing.T) {
	dir := t.TempDir()
	s := &AutoRecoveryState{Decision: "none"}
	if _, ok := s.Counts(); ok {
		t.Errorf("counts without a recorder")
	}
	s.CountAction("restore", ReasonQuorumLost, "success")
	s.CountAction("restore", ReasonQuorumLost, "success")
	s.CountAction("restore", ReasonQuorumLost, "failure")
	s.CountAction("restore", ReasonUnfinished, "failure")
	s.CountAction("", ReasonQuorumLost, "success")
	if !s.EnsureRecorder() || len(s.Recorder) != 16 {
		t.Fatalf("recorder %q", s.Recorder)
	}
	id := s.Recorder
	if s.EnsureRecorder() || s.Recorder != id {
		t.Errorf("a second EnsureRecorder changed the recorder %s to %s", id, s.Recorder)
	}
	if err := WriteAutoRecovery(dir, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAutoRecovery(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := func(action, reason, result string, n int64) AutoRecoveryCount {
		return AutoRecoveryCount{Action: action, Reason: reason, Result: result, Count: n}
	}
	want := []AutoRecoveryCount{c("restore", ReasonQuorumLost, "success", 2), c("restore", ReasonQuorumLost, "failure", 1),
		c("restore", ReasonUnfinished, "failure", 1), c("none", ReasonQuorumLost, "success", 1)}
	if fmt.Sprint(got.Actions) != fmt.Sprint(want) || got.Recorder != id {
		t.Errorf("counts %v of %s, want %v of %s", got.Actions, got.Recorder, want, id)
	}
	if rc, ok := got.Counts(); !ok || rc.Recorder != id || fmt.Sprint(rc.Actions) != fmt.Sprint(want) {
		t.Errorf("Counts: %+v %v", rc, ok)
	}
	for _, bad := range []struct{ file, want string }{
		{`{"actions":[{"action":"restore","result":"success","count":-3}]}`, "count of 0 or more"},
		{`{"recorder":"../x","actions":[]}`, "16 lower-case hex digits"},
	} {
		if err := os.WriteFile(AutoRecoveryStatePath(dir), []byte(bad.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadAutoRecovery(dir); err == nil || !strings.Contains(err.Error(), AutoRecoveryStatePath(dir)) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v", bad.file, err)
		}
	}
}
