package restore

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOpenFileRefusesStoreOptions: options that choose or read backups in
// the store are refused with a snapshot file, all named in one error.
func TestOpenFileRefusesStoreOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" accepted
	}{
		{"file alone", Options{}, ""},
		{"latest is the default", Options{Backup: "latest", Force: true, BumpRevision: 5}, ""},
		{"a backup ID", Options{Backup: "20261124T000000Z"}, "a backup ID"},
		{"a revision", Options{ToRevision: 5}, "a target revision"},
		{"a time", Options{ToTime: time.Now()}, "a target time"},
		{"a key file", Options{KeyFile: "k"}, "a key file"},
		{"two at once", Options{AllowUnauthenticated: true, SkipUntrusted: true}, "trusting unauthenticated manifests, skipping untrusted manifests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.FromSnapshot = "/tmp/x.snapshot"
			_, err := openFile(nil, tc.o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("openFile = %v; want it accepted", err)
				}
				return
			}
			if !errors.Is(err, ErrSourceConflict) {
				t.Fatalf("openFile = %v; want ErrSourceConflict", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "/tmp/x.snapshot") || strings.Contains(msg, "--") {
				t.Errorf("openFile error %q: want it to name %q and the file, and no flag", msg, tc.want)
			}
		})
	}
}

// TestCheckTargetRefusesConflicts (issue 26, defect 5): targets that each
// choose the point to restore are refused together, before anything is
// read; so are a timeline number below 1 and a timeline with a backup ID.
func TestCheckTargetRefusesConflicts(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		o    Options
		kind error // nil: accepted
		want string
	}{
		{"newest", Options{}, nil, ""},
		{"a revision", Options{ToRevision: 60}, nil, ""},
		{"a time", Options{ToTime: at}, nil, ""},
		{"a timeline and a revision", Options{Timeline: 2, ToRevision: 60}, nil, ""},
		{"a revision and a time", Options{ToRevision: 60, ToTime: at}, ErrConflictingTargets, "to revision 60 and to time 2026-11-27T12:00:00Z at once"},
		{"a backup ID and a timeline", Options{Backup: "20261127T120000.000Z-full-r5", Timeline: 2}, ErrConflictingTargets, "a backup ID names its own timeline"},
		{"timeline 0 is the current", Options{Timeline: 0, Backup: "latest"}, nil, ""},
		{"a negative timeline", Options{Timeline: -1}, ErrUnknownTimeline, "timelines are numbered from 1"},
		{"a negative revision", Options{ToRevision: -1}, ErrBadRevision, "revisions start at 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTarget(tc.o)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkTarget: %v, want %v with %q", err, tc.kind, tc.want)
			}
		})
	}
}
