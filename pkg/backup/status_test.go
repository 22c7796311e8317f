package backup

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// keyspaceDB writes an etcd-shaped database: puts of n keys, each key put
// twice, every third one deleted (a tombstone), in the key bucket, and a
// meta bucket.
func keyspaceDB(t *testing.T, path string, n int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rev := int64(1)
	err = db.Update(func(tx *bolt.Tx) error {
		kb, _ := tx.CreateBucket([]byte("key"))
		mb, _ := tx.CreateBucket([]byte("meta"))
		put := func(key string, tomb bool) error {
			rev++
			k := make([]byte, 17, 18)
			binary.BigEndian.PutUint64(k, uint64(rev))
			k[8] = '_'
			kv := mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}
			if tomb {
				k = append(k, 't')
			} else {
				kv.Value, kv.CreateRevision, kv.Version = []byte(fmt.Sprintf("value of %s at %d", key, rev)), rev, 1
			}
			v, err := kv.Marshal()
			if err != nil {
				return err
			}
			return kb.Put(k, v)
		}
		for round := 0; round < 2; round++ {
			for i := range n {
				if err := put(fmt.Sprintf("k%05d", i), false); err != nil {
					return err
				}
			}
		}
		for i := 0; i < n; i += 3 {
			if err := put(fmt.Sprintf("k%05d", i), true); err != nil {
				return err
			}
		}
		return mb.Put([]byte("consistent_index"), make([]byte, 8))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotStatusAsEtcdutl: snapshotStatus reports what etcdutl's
// snapshot status reports (hash, revision, live keys, size, storage
// version) for a real etcd snapshot and for a larger made-up keyspace.
func TestSnapshotStatusAsEtcdutl(t *testing.T) {
	made := filepath.Join(t.TempDir(), "made.db")
	keyspaceDB(t, made, 3000)
	for _, path := range []string{filepath.Join("testdata", "malformed", "good.db"), made} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want, err := snapshot.NewV3(zap.NewNop()).Status(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := snapshotStatus(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("snapshotStatus = %+v; etcdutl says %+v", got, want)
			}
			if want.TotalKey == 0 || want.Revision == 0 {
				t.Fatalf("empty keyspace: %+v", want)
			}
		})
	}
}
