package certs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/status"
)

func readState(t *testing.T, dir string) (status.RenewalState, bool) {
	t.Helper()
	b, err := os.ReadFile(status.RenewalStatePath(dir))
	if os.IsNotExist(err) {
		return status.RenewalState{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var st status.RenewalState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state file: %v\n%s", err, b)
	}
	return st, true
}

// TestRunRecordsState: the loop records its pid and heartbeat when it
// starts, then after a round what it renewed, when, and the next renewal
// point; the state file is 0600; status (cluster.Renewal) reads it as
// running; when the loop stops it records that, and status no longer
// reads it as running.
func TestRunRecordsState(t *testing.T) {
	dir, _, _ := shortLivedDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		RunRenewal(ctx, dir, slog.New(slog.DiscardHandler), nil)
	}()
	defer func() { cancel(); <-done }()

	// Due about a second after issuance (30s lifetime, 29s margin).
	var st status.RenewalState
	deadline := time.Now().Add(15 * time.Second)
	for {
		var ok bool
		st, ok = readState(t, dir)
		if ok && slices.Contains(st.LastRenewed, "server") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal of server recorded within 15 s: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.PID != os.Getpid() || st.StartedAt.Before(start.Add(-time.Second)) || st.Heartbeat.Before(st.StartedAt) {
		t.Errorf("pid %d, started %s, heartbeat %s; want pid %d started after %s", st.PID, st.StartedAt, st.Heartbeat, os.Getpid(), start)
	}
	if st.LastRenewal.IsZero() || st.LastRound.Before(st.LastRenewal) || st.LastError != "" {
		t.Errorf("after a renewal: %+v", st)
	}
	// Renewed just now with a 29 s margin of a 30 s life: the next point
	// is within about a second of now.
	if st.NextRenewal.IsZero() || st.NextRenewal.After(time.Now().Add(5*time.Second)) {
		t.Errorf("next renewal point %s, want about now", st.NextRenewal)
	}
	if fi, err := os.Stat(status.RenewalStatePath(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	c, err := cluster.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := status.Renewal(c, time.Now()); err != nil || !rs.Running || rs.PID != os.Getpid() || rs.Process != "agent" {
		t.Errorf("Renewal while running: %+v, %v", rs, err)
	}

	cancel()
	<-done
	st, _ = readState(t, dir)
	if st.StoppedAt.IsZero() {
		t.Errorf("stopped loop: %+v, want stoppedAt", st)
	}
	if rs, err := status.Renewal(c, time.Now()); err != nil || rs.Running {
		t.Errorf("Renewal after the loop stopped: %+v, %v; want not running", rs, err)
	}
}

// TestRunAdvisesRoundErrors: a round's error is recorded (and logged) with
// the advice the command hands the loop, which status then shows.
func TestRunAdvisesRoundErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte("name: [unclosed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunRenewal(ctx, dir, slog.New(slog.DiscardHandler), func(err error) error { return fmt.Errorf("%w (advised)", err) })
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if st, ok := readState(t, dir); ok && st.LastError != "" {
			if !strings.HasSuffix(st.LastError, " (advised)") {
				t.Errorf("recorded error %q, want the advice after it", st.LastError)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no round error recorded within 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
