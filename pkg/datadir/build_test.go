package datadir

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.uber.org/zap"
)

// makeEtcdDB writes a small database shaped like a snapshot of a running
// etcd: keys, meta, and membership buckets naming a member of the old
// cluster and a removed one, which a restore must not keep.
func makeEtcdDB(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		put := func(bucket, k, v string) error {
			b, err := tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), []byte(v))
		}
		for i := range 500 {
			if err := put("key", fmt.Sprintf("%08d_", i), fmt.Sprintf("value %d", i)); err != nil {
				return err
			}
		}
		for _, kv := range [][3]string{
			{"meta", "consistent_index", "\x00\x00\x00\x00\x00\x00\x10\x00"},
			{"meta", "term", "\x00\x00\x00\x00\x00\x00\x00\x07"},
			{"members", "8e9e05c52164694d", `{"id":10276657743932975437,"peerURLs":["http://old:2380"]}`},
			{"members_removed", "1234", "removed"},
			{"cluster", "clusterVersion", "3.6.0"},
		} {
			if err := put(kv[0], kv[1], kv[2]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dumpDB is every bucket's keys and values.
func dumpDB(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error { m[string(k)] = string(v); return nil })
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readWAL is a WAL's metadata, hard state and entries, read from its
// snapshot record as etcd does at start.
func readWAL(t *testing.T, dir string) (md []byte, st any, ents any) {
	t.Helper()
	snaps, err := wal.ValidSnapshotEntries(zap.NewNop(), dir)
	if err != nil || len(snaps) == 0 {
		t.Fatalf("WAL snapshot records of %s: %v %v", dir, snaps, err)
	}
	w, err := wal.Open(zap.NewNop(), dir, walpb.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	md, hs, es, err := w.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return md, hs, es
}

func copyTestFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFromSnapshotAsEtcdutl: the data dir FromSnapshot writes holds what
// etcdutl's restore writes from the same database, for every member of a
// three-member cluster, whether the database is copied or moved and with
// or without the SHA-256 `etcdctl snapshot save` appends.
func TestFromSnapshotAsEtcdutl(t *testing.T) {
	initial := "a=http://127.0.0.1:2380,b=http://127.0.0.1:2381,c=http://127.0.0.1:2382"
	peers := map[string]string{"a": "http://127.0.0.1:2380", "b": "http://127.0.0.1:2381", "c": "http://127.0.0.1:2382"}
	tests := []struct {
		name       string
		member     string
		move, hash bool
	}{
		{"copy", "a", false, false},
		{"move", "b", true, false},
		{"copy with hash", "c", false, true},
		{"move with hash", "a", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "snapshot.db")
			makeEtcdDB(t, src)
			if tt.hash {
				b, _ := os.ReadFile(src)
				sum := sha256.Sum256(b)
				if err := os.WriteFile(src, append(b, sum[:]...), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			theirs := filepath.Join(dir, "theirs.db")
			copyTestFile(t, src, theirs)
			srcBytes, _ := os.ReadFile(src)

			want := filepath.Join(dir, "etcdutl")
			if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
				SnapshotPath: theirs, Name: tt.member, OutputDataDir: want,
				PeerURLs: []string{peers[tt.member]}, InitialCluster: initial, InitialClusterToken: "tok",
				SkipHashCheck: true,
			}); err != nil {
				t.Fatal(err)
			}
			got := filepath.Join(dir, "steward")
			if err := FromSnapshot(FromSnapshotOptions{
				Snapshot: src, Name: tt.member, PeerURL: peers[tt.member],
				InitialCluster: initial, Token: "tok", Move: tt.move,
			}, got); err != nil {
				t.Fatal(err)
			}

			if w, g := dumpDB(t, filepath.Join(want, "member", "snap", "db")), dumpDB(t, filepath.Join(got, "member", "snap", "db")); !reflect.DeepEqual(w, g) {
				t.Errorf("database:\n got %v\nwant %v", g, w)
			}
			wmd, whs, wents := readWAL(t, filepath.Join(want, "member", "wal"))
			gmd, ghs, gents := readWAL(t, filepath.Join(got, "member", "wal"))
			if !bytes.Equal(wmd, gmd) || !reflect.DeepEqual(whs, ghs) || !reflect.DeepEqual(wents, gents) {
				t.Errorf("WAL: got %x %v %v, want %x %v %v", gmd, ghs, gents, wmd, whs, wents)
			}
			wsnaps, _ := filepath.Glob(filepath.Join(want, "member", "snap", "*.snap"))
			gsnaps, _ := filepath.Glob(filepath.Join(got, "member", "snap", "*.snap"))
			if len(wsnaps) != 1 || len(gsnaps) != 1 || filepath.Base(wsnaps[0]) != filepath.Base(gsnaps[0]) {
				t.Fatalf("snap files: got %v, want %v", gsnaps, wsnaps)
			}
			// The membership in etcd's v2 form: the same members (the order
			// they were added in follows map order: etcdutl's own files
			// differ in it from run to run).
			if w, g := readSnap(t, wsnaps[0]), readSnap(t, gsnaps[0]); !reflect.DeepEqual(w, g) {
				t.Errorf("snap file %s:\n got %v\nwant %v", filepath.Base(gsnaps[0]), g, w)
			}
			for _, d := range []string{got, filepath.Join(got, "member", "snap"), filepath.Join(got, "member", "wal")} {
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("%s: mode %v, %v; want 0700", d, fi.Mode().Perm(), err)
				}
			}
			if fi, err := os.Stat(filepath.Join(got, "member", "snap", "db")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("db: %v, %v; want 0600", fi.Mode().Perm(), err)
			}
			_, err := os.Stat(src)
			switch {
			case tt.move && err == nil:
				t.Errorf("moved snapshot %s still there", src)
			case !tt.move && (err != nil || !bytes.Equal(mustRead(t, src), srcBytes)):
				t.Errorf("copied snapshot %s changed or gone: %v", src, err)
			}
		})
	}
}

// readSnap is a raft snapshot file's metadata and the tree of its data
// (the membership as etcd's v2 store in JSON) without its per-node
// indexes, and the store's index. (The order of members in those indexes
// and in the store's event history follows map order.)
func readSnap(t *testing.T, path string) map[string]any {
	t.Helper()
	s, err := snap.Read(zap.NewNop(), path)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(s.Data, &data); err != nil {
		t.Fatal(err)
	}
	var strip func(v any)
	strip = func(v any) {
		if m, ok := v.(map[string]any); ok {
			delete(m, "CreatedIndex")
			delete(m, "ModifiedIndex")
			for _, c := range m {
				strip(c)
			}
		}
	}
	strip(data["Root"])
	return map[string]any{"metadata": s.Metadata.String(), "root": data["Root"], "index": data["CurrentIndex"]}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFromSnapshotRefuses: a member not in the initial cluster, or an out
// that exists, is refused, and nothing is left at out.
func TestFromSnapshotRefuses(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "snapshot.db")
	makeEtcdDB(t, src)
	existing := filepath.Join(dir, "existing")
	if err := os.Mkdir(existing, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    FromSnapshotOptions
		out  string
	}{
		{"member not in cluster", FromSnapshotOptions{Snapshot: src, Name: "z", PeerURL: "http://127.0.0.1:2390", InitialCluster: "a=http://127.0.0.1:2380", Token: "t"}, filepath.Join(dir, "z")},
		{"peer URL not the member's", FromSnapshotOptions{Snapshot: src, Name: "a", PeerURL: "http://127.0.0.1:2390", InitialCluster: "a=http://127.0.0.1:2380", Token: "t"}, filepath.Join(dir, "a")},
		{"out exists", FromSnapshotOptions{Snapshot: src, Name: "a", PeerURL: "http://127.0.0.1:2380", InitialCluster: "a=http://127.0.0.1:2380", Token: "t"}, existing},
		{"no snapshot", FromSnapshotOptions{Snapshot: filepath.Join(dir, "none.db"), Name: "a", PeerURL: "http://127.0.0.1:2380", InitialCluster: "a=http://127.0.0.1:2380", Token: "t", Move: true}, filepath.Join(dir, "b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := FromSnapshot(tt.o, tt.out); err == nil {
				t.Fatal("no error")
			}
			if tt.out == existing {
				return
			}
			if _, err := os.Lstat(tt.out); err == nil {
				t.Errorf("%s left behind", tt.out)
			}
		})
	}
	if _, err := os.Stat(src); err != nil {
		t.Errorf("snapshot gone after refusals: %v", err)
	}
}

// TestFromSnapshotMoveAcrossFilesystems: with Move, a data dir on another
// filesystem than the snapshot gets a copy (a rename cannot cross), and
// the data dir is whole.
func TestFromSnapshotMoveAcrossFilesystems(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "steward-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	dir := t.TempDir()
	var a, b syscall.Stat_t
	if syscall.Stat(other, &a) != nil || syscall.Stat(dir, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the test dir's filesystem")
	}
	src := filepath.Join(other, "snapshot.db")
	makeEtcdDB(t, src)
	out := filepath.Join(dir, "data")
	if err := FromSnapshot(FromSnapshotOptions{
		Snapshot: src, Name: "a", PeerURL: "http://127.0.0.1:2380",
		InitialCluster: "a=http://127.0.0.1:2380", Token: "tok", Move: true,
	}, out); err != nil {
		t.Fatal(err)
	}
	if got := dumpDB(t, filepath.Join(out, "member", "snap", "db")); len(got["members"]) != 1 || len(got["key"]) != 500 {
		t.Fatalf("database: %d members, %d keys; want 1 and 500", len(got["members"]), len(got["key"]))
	}
	readWAL(t, filepath.Join(out, "member", "wal"))
}
