package kmigrate

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestStateRoundTrip: what is saved reads back after the database is
// closed and opened again, failures accumulate chunk after chunk and are
// dropped when a new run starts, the read-only view sees the same, and a
// second writer is refused while the first holds the database.
func TestStateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "steward") // created by OpenState
	if got, err := ReadState(dir); err != nil || len(got) != 0 {
		t.Fatalf("ReadState of a directory without a database: %v, %v", got, err)
	}
	if _, err := os.Stat(StatePath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadState created the database: %v", err)
	}
	s, err := OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(StatePath(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("database file: %v, %v", fi, err)
	}
	if _, ok, err := s.Get("configmaps"); ok || err != nil {
		t.Fatalf("Get of an unknown resource: %v, %v", ok, err)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rs := ResourceState{Resource: "configmaps", Run: &RunState{StorageVersionHash: "h1", Version: "v1", StartedAt: start}}
	if err := s.Save(rs, nil, true); err != nil {
		t.Fatal(err)
	}
	// Chunk 1, with two refused objects; chunk 2 with one.
	rs.Run.Continue, rs.Run.LastKey, rs.Run.Chunks, rs.Run.Migrated, rs.Run.Failed = "tok1", "ns-a/cm-0499", 1, 498, 2
	f1 := []Failure{{Namespace: "ns-a", Name: "cm-0007", Code: 422, Reason: "denied"}, {Namespace: "ns-a", Name: "cm-0003", Code: 403, Reason: "webhook says no"}}
	if err := s.Save(rs, f1, false); err != nil {
		t.Fatal(err)
	}
	rs.Run.Continue, rs.Run.LastKey, rs.Run.Chunks, rs.Run.Migrated, rs.Run.Skipped, rs.Run.Failed = "", "ns-b/cm-0999", 2, 996, 1, 3
	rs.Run.Done, rs.Run.FinishedAt = true, start.Add(time.Minute)
	f2 := []Failure{{Name: "cluster-scoped", Code: 400, Reason: "bad"}}
	if err := s.Save(rs, f2, false); err != nil {
		t.Fatal(err)
	}
	other := ResourceState{Resource: "widgets.example.com", MigratedHash: "wh", MigratedAt: start,
		Run: &RunState{StorageVersionHash: "wh", Version: "v2", Migrated: 5, Done: true}}
	if err := s.Save(other, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get("configmaps")
	if err != nil || !ok {
		t.Fatalf("Get: %v, %v", ok, err)
	}
	if got.Run.UpdatedAt.IsZero() {
		t.Error("UpdatedAt not set")
	}
	got.Run.UpdatedAt, rs.Run.UpdatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, rs) {
		t.Errorf("read back\n%+v %+v\nwant\n%+v %+v", got, got.Run, rs, rs.Run)
	}
	if p := got.Run.Processed(); p != 1000 {
		t.Errorf("processed %d, want 1000", p)
	}
	fs, err := s.Failures("configmaps", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Failure{f2[0], f1[1], f1[0]} // key order: "cluster-scoped" < "ns-a/cm-0003" < "ns-a/cm-0007"
	if !reflect.DeepEqual(fs, want) {
		t.Errorf("failures %+v, want %+v", fs, want)
	}
	if fs, _ := s.Failures("configmaps", 2); len(fs) != 2 {
		t.Errorf("limit 2: %d failures", len(fs))
	}
	if fs, err := s.Failures("widgets.example.com", 0); err != nil || fs == nil || len(fs) != 0 {
		t.Errorf("failures of a resource without any: %v, %v (want an empty, non-nil slice)", fs, err)
	}

	// A second writer is refused while this one holds the database.
	if _, err := OpenState(dir); !errors.Is(err, ErrStateLocked) {
		t.Errorf("second OpenState: %v, want ErrStateLocked", err)
	}
	// A new run drops the old failures.
	rs.Run = &RunState{StorageVersionHash: "h2", Version: "v1"}
	if err := s.Save(rs, nil, true); err != nil {
		t.Fatal(err)
	}
	if fs, _ := s.Failures("configmaps", 0); len(fs) != 0 {
		t.Errorf("failures after a reset: %+v", fs)
	}
	s.Close()

	all, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["widgets.example.com"].MigratedHash != "wh" || all["configmaps"].Run.StorageVersionHash != "h2" ||
		all["configmaps"].MigratedHash != "" {
		t.Errorf("ReadState: %+v", all)
	}
}
