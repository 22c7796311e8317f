package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// TestLostDataError: the refusal says when etcd was last started on the
// data dir (what the version record's time is), not that it "ran until"
// then.
func TestLostDataError(t *testing.T) {
	at := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	err := lostDataError("/d/members/etcd-1/data", "etcd-1", datadir.VersionRecord{Version: "3.6.16", UpdatedAt: at})
	for _, want := range []string{"data dir /d/members/etcd-1/data is empty", "etcd 3.6.16 was started on it (last at 2026-11-27T21:00:00Z", "its data was lost; rebuild it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
	// The command says how to rebuild it (cli.LibraryAdvice).
	if de, ok := errors.AsType[*DataDirError](err); !ok || de.Member != "etcd-1" {
		t.Errorf("%v: not a DataDirError of etcd-1", err)
	}
	if strings.Contains(err.Error(), "until") {
		t.Errorf("%v: the record's time is the last start, not when etcd stopped", err)
	}
}
