package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// version) for a real etcd snapshot and for a larger made-up keyspace;
// with prepare, on a copy, the same but the size (the freelist written
// back adds pages), and the copy's freelist is then written
// (preparedLike).
func TestSnapshotStatusAsEtcdutl(t *testing.T) {
	made := filepath.Join(t.TempDir(), "made.db")
	keyspaceDB(t, made, 3000)
	for _, path := range []string{filepath.Join("testdata", "malformed", "good.db"), made} {
		for _, prepare := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prepare=%v", filepath.Base(path), prepare), func(t *testing.T) {
				want, err := snapshot.NewV3(zap.NewNop()).Status(path)
				if err != nil {
					t.Fatal(err)
				}
				if want.TotalKey == 0 || want.Revision == 0 {
					t.Fatalf("empty keyspace: %+v", want)
				}
				if !prepare {
					got, err := snapshotStatus(path, false)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("snapshotStatus = %+v; etcdutl says %+v", got, want)
					}
					return
				}
				cp := copyFile(t, path)
				got, err := snapshotStatus(cp, true)
				if err != nil {
					t.Fatal(err)
				}
				got.TotalSize = want.TotalSize
				if got != want {
					t.Fatalf("snapshotStatus(prepare) = %+v; etcdutl says %+v of the original", got, want)
				}
				preparedLike(t, cp, path)
			})
		}
	}
}

// TestSnapshotStatusRefusesInconsistent: a database bbolt reads without
// crashing but whose check finds an error (a page neither reachable nor
// in the written freelist) is refused, read-only and prepared alike, with
// the check's finding; the hash running beside the check does not hide it.
func TestSnapshotStatusRefusesInconsistent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leak.db")
	keyspaceDB(t, path, 3000) // bbolt's defaults: the freelist is written
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A bucket written, then dropped: its pages are free.
	junk := []byte("junk")
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(junk)
		for i := range 200 {
			if err == nil {
				err = b.Put(fmt.Appendf(nil, "%05d", i), make([]byte, 1000))
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(junk) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fl := freelistPage(t, path)
	if fl == noFreelist {
		t.Fatal("bbolt wrote no freelist")
	}
	// Page header: id u64, flags u16, count u16, overflow u32; then the
	// free page IDs. One fewer: its last page is leaked.
	off := int(fl) * 4096
	count := binary.LittleEndian.Uint16(raw[off+10:])
	if count == 0 || count == 0xffff {
		t.Fatalf("freelist page holds %d IDs; want a few", count)
	}
	binary.LittleEndian.PutUint16(raw[off+10:], count-1)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, prepare := range []bool{false, true} {
		t.Run(fmt.Sprintf("prepare=%v", prepare), func(t *testing.T) {
			_, err := snapshotStatus(copyFile(t, path), prepare)
			if err == nil || !strings.Contains(err.Error(), "integrity check failed") || !strings.Contains(err.Error(), "unreachable unfreed") {
				t.Fatalf("snapshotStatus of a leaked page = %v; want the check's finding (unreachable unfreed)", err)
			}
		})
	}
}

// noFreelist is bbolt's freelist page ID in a meta page when the freelist
// is not written to the file (etcd's databases, NoFreelistSync).
const noFreelist = ^uint64(0)

// freelistPage reads, from the newer of the two meta pages of the bbolt
// database at path (4 KiB pages), the page its freelist is written at,
// or noFreelist: what tells bbolt whether an open must walk every page.
func freelistPage(t *testing.T, path string) uint64 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Meta: page header (16), magic, version, page size, flags (4 each),
	// root bucket (16), freelist, high water mark, txid (8 each).
	var fl, txid uint64
	for _, off := range []int{16, 4096 + 16} {
		m := raw[off:]
		if binary.LittleEndian.Uint32(m) != 0xED0CDAED {
			t.Fatalf("%s: no bbolt meta page at %d", path, off-16)
		}
		if tx := binary.LittleEndian.Uint64(m[48:]); tx >= txid {
			fl, txid = binary.LittleEndian.Uint64(m[32:]), tx
		}
	}
	return fl
}

// preparedLike fails t unless the database at got holds the keyspace of
// the one at want (etcdutl's snapshot hash, revision and keys) and has
// its freelist written (no open of it walks every page).
func preparedLike(t *testing.T, got, want string) {
	t.Helper()
	ws, err := snapshot.NewV3(zap.NewNop()).Status(want)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := snapshot.NewV3(zap.NewNop()).Status(got)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Hash != ws.Hash || gs.Revision != ws.Revision || gs.TotalKey != ws.TotalKey || gs.Version != ws.Version {
		t.Fatalf("prepared database: %+v; want the keyspace of %+v", gs, ws)
	}
	if fl := freelistPage(t, got); fl == noFreelist {
		t.Fatalf("prepared database %s has no freelist written: every open walks it", got)
	}
}

// copyFile copies path into a new file under t.TempDir and returns it.
func copyFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(cp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestFreelistUnwritten: etcd's snapshot has no freelist written, a
// database bbolt wrote with its defaults has one, and a file that is not
// a bbolt database is not taken for one without (the check then walks).
func TestFreelistUnwritten(t *testing.T) {
	synced := filepath.Join(t.TempDir(), "synced.db")
	keyspaceDB(t, synced, 10)
	short := filepath.Join(t.TempDir(), "short.db")
	if err := os.WriteFile(short, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{filepath.Join("testdata", "malformed", "good.db"), true},
		{synced, false},
		{short, false},
		{filepath.Join(t.TempDir(), "missing.db"), false},
	} {
		if got := freelistUnwritten(tt.path); got != tt.want {
			t.Errorf("freelistUnwritten(%s) = %v; want %v", filepath.Base(tt.path), got, tt.want)
		}
	}
}

// TestCheckToWriteRefusesKeyOrder: a database without a written freelist
// (as etcd writes them) whose keys are out of order is refused by the
// read-only check and by the check of a database to write alike: in both,
// the walk that rebuilds the freelist finds it first, and bbolt panics
// (ErrMalformedSnapshot); the latter writes no freelist.
func TestCheckToWriteRefusesKeyOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "order.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		// Large enough for pages of its own (bbolt checks no inline
		// bucket).
		b, err := tx.CreateBucket([]byte("lease"))
		for i := range 20 {
			if err == nil {
				err = b.Put(fmt.Appendf(nil, "key-%04d", i), make([]byte, 100))
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A second transaction (the key bucket Inspect reads): the other meta
	// page, too, then names no freelist (a new file's both name its first).
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("key"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(raw, []byte("key-0010")) != 1 {
		t.Fatal("key not found once in the file")
	}
	raw = bytes.Replace(raw, []byte("key-0010"), []byte("key-9999"), 1)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if !freelistUnwritten(path) {
		t.Fatal("bbolt wrote a freelist with NoFreelistSync")
	}
	if _, err := Inspect(t.Context(), path); !errors.Is(err, ErrMalformedSnapshot) {
		t.Fatalf("Inspect = %v; want an error wrapping ErrMalformedSnapshot", err)
	}
	cp := copyFile(t, path)
	if _, err := checkToWrite(t.Context(), cp); !errors.Is(err, ErrMalformedSnapshot) {
		t.Fatalf("checkToWrite = %v; want an error wrapping ErrMalformedSnapshot", err)
	}
	if !freelistUnwritten(cp) {
		t.Fatal("checkToWrite of a refused database wrote its freelist")
	}
}
