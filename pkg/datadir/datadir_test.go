package datadir

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

func makeDB(t *testing.T, path string, rev, compacted uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		kb, _ := tx.CreateBucket([]byte("key"))
		mb, _ := tx.CreateBucket([]byte("meta"))
		k := make([]byte, 17)
		binary.BigEndian.PutUint64(k, rev)
		k[8] = '_'
		if err := kb.Put(k, []byte("v")); err != nil {
			return err
		}
		c := make([]byte, 17)
		binary.BigEndian.PutUint64(c, compacted)
		return mb.Put([]byte("finishedCompactRev"), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	dir := func(name string, wal, db bool, rev, compacted uint64) string {
		d := filepath.Join(root, name)
		os.MkdirAll(filepath.Join(d, "member", "wal"), 0o700)
		os.MkdirAll(filepath.Join(d, "member", "snap"), 0o700)
		if wal {
			os.WriteFile(filepath.Join(d, "member", "wal", "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600)
		}
		if db {
			makeDB(t, filepath.Join(d, "member", "snap", "db"), rev, compacted)
		}
		return d
	}
	tests := []struct {
		dir     string
		state   string
		rev     int64
		problem string
	}{
		{filepath.Join(root, "missing"), Empty, 0, ""},
		{dir("nowal", false, true, 5, 0), Invalid, 0, "no WAL files"},
		{dir("nodb", true, false, 0, 0), Invalid, 0, "no database"},
		{dir("valid", true, true, 42, 7), Valid, 42, ""},
		{dir("compacted", true, true, 10, 30), Valid, 30, ""},
	}
	for _, tt := range tests {
		f := Check(tt.dir)
		if f.State != tt.state || f.Revision != tt.rev || !strings.Contains(f.Problem, tt.problem) {
			t.Errorf("%s: %+v, want %s rev %d problem %q", filepath.Base(tt.dir), f, tt.state, tt.rev, tt.problem)
		}
	}
	garbage := dir("garbage", true, false, 0, 0)
	os.WriteFile(filepath.Join(garbage, "member", "snap", "db"), []byte("not a bolt database at all"), 0o600)
	if f := Check(garbage); f.State != Invalid || !strings.Contains(f.Problem, "does not open") {
		t.Errorf("garbage db: %+v", f)
	}
}

// TestDiscardFailedBootstrap: a member dir without a WAL file goes (with
// its database, as etcd leaves it after a failed join), and the data dir
// is Empty again, as does one whose only WAL is still in wal.tmp's
// rename; a member dir with a WAL file, a data dir without a member dir,
// and a member dir without a WAL file beside a version record (a member
// that once served, then lost its WAL files) are left as they are.
func TestDiscardFailedBootstrap(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files ...string) string {
		d := filepath.Join(root, name)
		for _, f := range append([]string{"member/snap/.keep"}, files...) {
			p := filepath.Join(d, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	failed := mk("failed", "member/snap/db")
	os.MkdirAll(filepath.Join(failed, "member", "wal"), 0o700)
	served := mk("served", "member/snap/db")
	if err := WriteRecord(served, "3.6.16", time.Now()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir     string
		removed bool
		after   string // Check's state afterwards
	}{
		{failed, true, Empty},
		{mk("tmp-only", "member/wal.tmp/0000000000000000-0000000000000000.wal"), true, Empty},
		{mk("has-wal", "member/wal/0000000000000000-0000000000000000.wal"), false, Invalid},
		{filepath.Join(root, "missing"), false, Empty},
		{served, false, Invalid},
	}
	for _, tt := range tests {
		removed, err := DiscardFailedBootstrap(tt.dir)
		if err != nil || removed != tt.removed {
			t.Errorf("%s: removed %v, err %v; want removed %v", filepath.Base(tt.dir), removed, err, tt.removed)
		}
		if f := Check(tt.dir); f.State != tt.after {
			t.Errorf("%s afterwards: %s, want %s", filepath.Base(tt.dir), f, tt.after)
		}
	}
	for _, kept := range []string{"has-wal/member/snap/.keep", "served/member/snap/db"} {
		if _, err := os.Stat(filepath.Join(root, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
}

func TestMemberID(t *testing.T) {
	dir := t.TempDir()
	md, err := (&etcdserverpb.Metadata{NodeID: 0x8e9e05c52164694d, ClusterID: 0xcdf818194e3a8c32}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(zap.NewNop(), filepath.Join(dir, "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		member    uint64
		wantErr   bool
	}{
		{"a WAL", filepath.Join(dir, "wal"), 0x8e9e05c52164694d, false},
		{"no WAL", t.TempDir(), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, c, err := MemberID(tc.dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if m != tc.member || !tc.wantErr && c != 0xcdf818194e3a8c32 {
				t.Errorf("member %x cluster %x, want member %x", m, c, tc.member)
			}
		})
	}
}
