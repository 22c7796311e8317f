package backup

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// makeDB writes buckets of key/value pairs into a new bbolt file.
func makeDB(t *testing.T, path string, buckets map[string]map[string]string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for name, kvs := range buckets {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for k, v := range kvs {
				if err := b.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readDB(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rev(n uint64) string {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return string(b)
}

func TestGraft(t *testing.T) {
	dir := t.TempDir()
	dst, src := filepath.Join(dir, "backup.db"), filepath.Join(dir, "current.db")
	makeDB(t, dst, map[string]map[string]string{
		"key":     {rev(1): "old-a", rev(2): "old-b"},
		"lease":   {"L1": "old lease"},
		"members": {"m1": "membership of the backup"},
		"meta":    {"consistent_index": "backup index", "finishedCompactRev": rev(1)},
	})
	// The current database: "b" was deleted and compacted away, "c" added,
	// a role added; it has no lease bucket entries and a bucket the older
	// schema does not know.
	makeDB(t, src, map[string]map[string]string{
		"key":       {rev(5): "new-a", rev(9): "new-c"},
		"lease":     {},
		"authRoles": {"r": "role"},
		"meta":      {"consistent_index": "current index", "scheduledCompactRev": rev(8), "finishedCompactRev": rev(8), "storageVersion": "3.6.0"},
		"newer":     {"x": "y"},
	})
	// 25,000 more keys: more than one batch.
	db, _ := bolt.Open(src, 0o600, nil)
	_ = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		for i := uint64(100); i < 25100; i++ {
			if err := b.Put([]byte(rev(i)), []byte("bulk")); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()

	if err := Graft(dst, src); err != nil {
		t.Fatal(err)
	}
	got := readDB(t, dst)
	if len(got["key"]) != 25002 || got["key"][rev(5)] != "new-a" || got["key"][rev(9)] != "new-c" || got["key"][rev(1)] != "" {
		t.Errorf("key bucket: %d entries, rev 5 %q, rev 9 %q, rev 1 %q; want the current keyspace only", len(got["key"]), got["key"][rev(5)], got["key"][rev(9)], got["key"][rev(1)])
	}
	if len(got["lease"]) != 0 {
		t.Errorf("lease bucket: %v, want the current (empty) one", got["lease"])
	}
	if got["authRoles"]["r"] != "role" {
		t.Errorf("authRoles: %v", got["authRoles"])
	}
	if got["members"]["m1"] != "membership of the backup" {
		t.Errorf("members bucket changed: %v", got["members"])
	}
	m := got["meta"]
	if m["consistent_index"] != "backup index" || m["finishedCompactRev"] != rev(8) || m["scheduledCompactRev"] != rev(8) || m["storageVersion"] != "" {
		t.Errorf("meta: %q", m)
	}
	if _, ok := got["newer"]; ok {
		t.Error("a bucket of the newer schema was copied")
	}
}

func TestGraftRefusesNonEtcd(t *testing.T) {
	dir := t.TempDir()
	dst, src := filepath.Join(dir, "backup.db"), filepath.Join(dir, "other.db")
	makeDB(t, dst, map[string]map[string]string{"key": {rev(1): "a"}, "meta": {}})
	makeDB(t, src, map[string]map[string]string{"stuff": {"a": "b"}})
	if err := Graft(dst, src); err == nil {
		t.Fatal("graft from a database without a key bucket succeeded")
	}
	if got := readDB(t, dst); got["key"][rev(1)] != "a" {
		t.Fatalf("a refused graft changed the destination: %v", got)
	}
}
