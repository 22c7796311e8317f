package restore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
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

// TestReplaying: the progress line names the range a restore replays (to
// its target revision, from the segments that hold it), not the chain's.
func TestReplaying(t *testing.T) {
	full := backup.Manifest{ID: "f", Kind: backup.KindFull, EndRevision: 1000000060}
	seg := func(start, end int64) backup.Manifest {
		return backup.Manifest{Kind: "delta", StartRevision: start, EndRevision: end}
	}
	chain := backup.Chain{Full: full, End: 1000000104, Deltas: []backup.Manifest{
		seg(1000000061, 1000000062), seg(1000000063, 1000000067), seg(1000000068, 1000000090), seg(1000000091, 1000000104)}}
	at := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"latest", Options{}, "replaying 4 delta segments (revisions 1000000061 to 1000000104)"},
		{"to a revision", Options{ToRevision: 1000000067}, "replaying 2 delta segments (revisions 1000000061 to 1000000067)"},
		{"to the first revision of a segment", Options{ToRevision: 1000000068}, "replaying 3 delta segments (revisions 1000000061 to 1000000068)"},
		{"to the full backup's", Options{ToRevision: 1000000060}, "replaying nothing: revision 1000000060 is the full backup's own"},
		{"to a time", Options{ToTime: at}, "replaying the delta segments from revision 1000000061 up to 2026-11-27T21:00:00Z (the chain's 4 segments reach revision 1000000104)"},
		{"to a time on a timeline branched at a revision", Options{ToTime: at, ToRevision: 1000000090}, "replaying the delta segments from revision 1000000061 up to 2026-11-27T21:00:00Z, at most to revision 1000000090 (the chain's 4 segments reach revision 1000000104)"},
	} {
		if got := replaying(full, chain, tc.o); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got, want := replayed(full, 1000000070, Options{ToTime: at}), "replayed revisions 1000000061 to 1000000070, the last written at or before 2026-11-27T21:00:00Z"; got != want {
		t.Errorf("after a replay to a time: %q, want %q", got, want)
	}
	if got := replayed(full, 1000000067, Options{ToRevision: 1000000067}); got != "" {
		t.Errorf("after a replay to a revision: %q, want nothing more", got)
	}
}
