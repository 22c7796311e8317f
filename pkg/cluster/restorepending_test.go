package cluster

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRestorePendingMarker(t *testing.T) {
	dir := t.TempDir()
	if err := RequireNoRestorePending(dir, "start the members"); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := RemoveRestorePending(dir); err != nil {
		t.Fatalf("removing no marker: %v", err)
	}
	at := time.Date(2026, 11, 27, 23, 0, 0, 0, time.UTC)
	if err := WriteRestorePending(dir, RestorePending{Timeline: 3, Members: []string{"etcd-1", "etcd-2"}, StartedAt: at}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(RestorePendingPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker: %v, mode %v, want 0600", err, fi)
	}
	p, err := ReadRestorePending(dir)
	if err != nil || p.Timeline != 3 || len(p.Members) != 2 || !p.StartedAt.Equal(at) {
		t.Fatalf("read back %+v, %v", p, err)
	}
	err = RequireNoRestorePending(dir, "start the members")
	if !errors.Is(err, ErrRestoreInterrupted) || !strings.Contains(err.Error(), "timeline 3") || !strings.Contains(err.Error(), "etcd-1, etcd-2") {
		t.Fatalf("refusal: %v", err)
	}
	// A damaged marker still refuses.
	if err := os.WriteFile(RestorePendingPath(dir), []byte("{tor"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RequireNoRestorePending(dir, "start the members"); !errors.Is(err, ErrRestoreInterrupted) {
		t.Fatalf("damaged marker: %v, want a refusal", err)
	}
	if err := RemoveRestorePending(dir); err != nil {
		t.Fatal(err)
	}
	if err := RequireNoRestorePending(dir, "start the members"); err != nil {
		t.Fatalf("after removal: %v", err)
	}
}

func FuzzReadRestorePending(f *testing.F) {
	f.Add([]byte(`{"timeline":3,"members":["etcd-1"],"startedAt":"2026-11-27T23:00:00Z"}`))
	f.Add([]byte("{tor"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.MkdirAll(dir+"/status", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(RestorePendingPath(dir), b, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := ReadRestorePending(dir)
		if err != nil || p == nil {
			t.Fatalf("a marker file of any content is a marker: %+v, %v", p, err)
		}
		if err := RequireNoRestorePending(dir, "x"); !errors.Is(err, ErrRestoreInterrupted) {
			t.Fatalf("want a refusal, got %v", err)
		}
	})
}
