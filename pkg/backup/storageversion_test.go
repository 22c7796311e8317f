package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// svDB writes a database with etcd's meta and cluster buckets holding a
// storage version and a cluster version ("" leaves the field out).
func svDB(t *testing.T, storage, cluster string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucket(metaBucket)
		if err != nil {
			return err
		}
		cb, err := tx.CreateBucket(clusterBucket)
		if err != nil {
			return err
		}
		if storage != "" {
			if err := mb.Put(storageVersionKey, []byte(storage)); err != nil {
				return err
			}
		}
		if cluster != "" {
			return cb.Put(clusterVersionKey, []byte(cluster))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// svRead returns the storage and cluster versions the database holds
// ("<none>" for a missing field).
func svRead(t *testing.T, path string) (string, string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	get := func(tx *bolt.Tx, b, k []byte) string {
		if v := tx.Bucket(b).Get(k); v != nil {
			return string(v)
		}
		return "<none>"
	}
	var s, c string
	_ = db.View(func(tx *bolt.Tx) error {
		s, c = get(tx, metaBucket, storageVersionKey), get(tx, clusterBucket, clusterVersionKey)
		return nil
	})
	return s, c
}

// TestLowerStorageVersion: what etcd's downgrade writes, one minor at a
// time (server/storage/schema/migration.go): 3.7 -> 3.6 sets the version,
// 3.6 -> 3.5 removes the field 3.6 added; the cluster version follows.
// Older or equal databases are left alone; two minors newer is refused
// with nothing written.
func TestLowerStorageVersion(t *testing.T) {
	for _, tc := range []struct {
		name, storage, cluster, target string
		wantS, wantC                   string
		lowered                        bool
		refused                        bool
	}{
		{"3.7 into 3.6", "3.7.0", "3.7.0", "3.6.16", "3.6.0", "3.6.0", true, false},
		{"3.6 into 3.5", "3.6.0", "3.6.0", "3.5.35", "<none>", "3.5.0", true, false},
		{"3.7 into 3.7", "3.7.0", "3.7.0", "3.7.3", "3.7.0", "3.7.0", false, false},
		{"3.6 into 3.7", "3.6.0", "3.6.0", "3.7.3", "3.6.0", "3.6.0", false, false},
		{"3.5 (no storage version) into 3.6", "", "3.5.0", "3.6.16", "<none>", "3.5.0", false, false},
		{"3.7 during its downgrade into 3.6", "3.6.0", "3.6.0", "3.6.16", "3.6.0", "3.6.0", false, false},
		{"3.7 without a cluster version into 3.6", "3.7.0", "", "3.6.16", "3.6.0", "<none>", true, false},
		{"3.7 into 3.5", "3.7.0", "3.7.0", "3.5.35", "3.7.0", "3.7.0", false, true},
		{"4.0 into 3.6", "4.0.0", "4.0.0", "3.6.16", "4.0.0", "4.0.0", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := svDB(t, tc.storage, tc.cluster)
			sv, err := LowerStorageVersion(path, tc.target)
			if tc.refused != errors.Is(err, ErrStorageTooNew) {
				t.Fatalf("refused: %v, want refused %v", err, tc.refused)
			}
			if !tc.refused && err != nil {
				t.Fatal(err)
			}
			if sv.Lowered != tc.lowered {
				t.Errorf("lowered %v, want %v (%+v)", sv.Lowered, tc.lowered, sv)
			}
			if s, c := svRead(t, path); s != tc.wantS || c != tc.wantC {
				t.Errorf("storage version %s, cluster version %s; want %s, %s", s, c, tc.wantS, tc.wantC)
			}
		})
	}
	if _, err := LowerStorageVersion(filepath.Join(t.TempDir(), "absent"), "3.6.16"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing database: %v", err)
	}
	if _, err := LowerStorageVersion(svDB(t, "3.7.0", ""), "latest"); err == nil {
		t.Error("a target that is no version was accepted")
	}
}

// FuzzLowerStorageVersion: whatever versions a database holds (they are
// read from disk) and whatever the target, LowerStorageVersion does not
// panic, refuses without writing, and when it lowers leaves the target's
// minor (or, for 3.5, no storage version).
func FuzzLowerStorageVersion(f *testing.F) {
	for _, s := range [][3]string{
		{"3.7.0", "3.7.0", "3.6.16"}, {"3.6.0", "3.6.0", "3.5.35"}, {"3.7.0", "3.7.0", "3.5.35"},
		{"", "3.5.0", "3.6.16"}, {"garbage", "3.7.0", "3.6.16"}, {"3.-1.0", "x", "3.6"}, {"99999999999999999999.1.0", "", "3.6.16"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, storage, cluster, target string) {
		if storage == "" && cluster == "" {
			return // nothing to write: svDB leaves the fields out
		}
		path := svDB(t, storage, cluster)
		sv, err := LowerStorageVersion(path, target)
		s, c := svRead(t, path)
		switch {
		case err != nil && (s != orNone(storage) || c != orNone(cluster)):
			t.Fatalf("refused (%v) but wrote: storage %q cluster %q", err, s, c)
		case err == nil && !sv.Lowered && (s != orNone(storage) || c != orNone(cluster)):
			t.Fatalf("not lowered but wrote: storage %q cluster %q", s, c)
		case err == nil && sv.Lowered:
			maj, mi, _ := minorOf(target)
			want := fmt.Sprintf("%d.%d.0", maj, mi)
			if maj == 3 && mi < 6 {
				want = "<none>"
			}
			if s != want {
				t.Fatalf("lowered to storage %q, want %q", s, want)
			}
		}
	})
}

func orNone(v string) string {
	if v == "" {
		return "<none>"
	}
	return v
}
