package backup

import (
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/server/v3/storage/mvcc"
)

// etcdRev is etcd's own encoding of a revision key, to check that
// BumpRevision writes the bytes etcdutl's restore would.
func etcdRev(main int64) string {
	return string(mvcc.RevToBytes(mvcc.Revision{Main: main}, mvcc.NewRevBytes()))
}

func TestBumpRevision(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keys      []int64
		finished  int64 // 0: none recorded
		amount    int64
		wantBumps int64
	}{
		{"newest key", []int64{3, 7, 12}, 0, 1000, 1012},
		// A compaction newer than every remaining key (its tombstone was
		// compacted away): the bump starts above the compaction.
		{"compaction above the keys", []int64{3, 7}, 20, 1000, 1020},
		{"empty keyspace", nil, 0, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			keys := map[string]string{}
			for _, k := range tc.keys {
				keys[etcdRev(k)] = "kv"
			}
			meta := map[string]string{}
			if tc.finished > 0 {
				meta["finishedCompactRev"] = etcdRev(tc.finished)
			}
			makeDB(t, path, map[string]map[string]string{"key": keys, "meta": meta})
			got, err := BumpRevision(path, tc.amount)
			if err != nil || got != tc.wantBumps {
				t.Fatalf("BumpRevision = %d, %v; want %d", got, err, tc.wantBumps)
			}
			db := readDB(t, path)
			if v, ok := db["key"][etcdRev(tc.wantBumps)]; !ok || v != "" {
				t.Errorf("no empty marker key at revision %d: %q %v", tc.wantBumps, v, ok)
			}
			if len(db["key"]) != len(tc.keys)+1 {
				t.Errorf("key bucket has %d keys, want %d", len(db["key"]), len(tc.keys)+1)
			}
			if v := db["meta"]["scheduledCompactRev"]; v != etcdRev(tc.wantBumps) {
				t.Errorf("scheduledCompactRev %x, want revision %d", v, tc.wantBumps)
			}
		})
	}
}

func TestBumpRevisionRefuses(t *testing.T) {
	dir := t.TempDir()
	notEtcd := filepath.Join(dir, "other.db")
	makeDB(t, notEtcd, map[string]map[string]string{"things": {"a": "b"}})
	if _, err := BumpRevision(notEtcd, 10); err == nil {
		t.Error("BumpRevision of a database without etcd's buckets succeeded")
	}
	if _, err := BumpRevision(notEtcd, 0); err == nil {
		t.Error("BumpRevision by 0 succeeded")
	}
	missing := filepath.Join(dir, "missing.db")
	if _, err := BumpRevision(missing, 10); err == nil {
		t.Error("BumpRevision of a missing file succeeded")
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("BumpRevision created the missing file")
	}
	if before := readDB(t, notEtcd); len(before) != 1 || len(before["things"]) != 1 {
		t.Errorf("a refused bump changed the database: %v", before)
	}
}
