package recovery

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// TestJournalReseeding: a reseed's journal keeps its rebuild state across
// a write and a read (0600), and a journal written before reseeds were
// rebuilt reads as one whose seed needs no rebuild.
func TestJournalReseeding(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir()}
	j := &recoveryJournal{Seed: "etcd-3", SeededAt: time.Now().UTC().Truncate(time.Second), Reseeding: true, FromTimeline: 1}
	if err := writeRecoveryJournal(t.Context(), c, j); err != nil {
		t.Fatal(err)
	}
	got, err := readRecoveryJournal(c)
	if err != nil || got == nil || *got != *j {
		t.Fatalf("read back %+v, %v; want %+v", got, err, j)
	}
	if fi, _ := os.Stat(recoveryJournalPath(c)); fi.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v, want 0600", fi.Mode().Perm())
	}
	old := `{"seed": "etcd-1", "restoredFrom": "full-r100", "seededAt": "2026-11-27T10:00:00Z"}`
	if err := os.WriteFile(filepath.Join(c.Dir, "status", "recovery.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = readRecoveryJournal(c)
	if err != nil || got.Reseeding || got.FromTimeline != 0 || got.RestoredFrom != "full-r100" {
		t.Fatalf("an older journal read as %+v, %v", got, err)
	}
	if err := removeRecoveryJournal(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if got, err := readRecoveryJournal(c); got != nil || err != nil {
		t.Fatalf("after removal: %+v, %v", got, err)
	}
}
