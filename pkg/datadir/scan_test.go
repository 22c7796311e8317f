package datadir

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// revKey is etcd's key of a revision (main, sub) in the key bucket: 8
// bytes big-endian, '_', 8 bytes; a tombstone appends 't'.
func revKey(main, sub int64, tomb bool) []byte {
	k := make([]byte, 17, 18)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], uint64(sub))
	if tomb {
		k = append(k, 't')
	}
	return k
}

// scanDB is a database shaped as etcd's: revisions in "key", the
// compacted revision in "meta", other buckets beside them.
type scanDB struct {
	revs      int
	valueSize int
	bigEvery  int // every n-th value is 200 KB (overflow pages); 0: none
	compacted int64
	noMeta    bool
	noKey     bool
	deleteTo  int // delete revisions below this after writing (freed pages)
	pageSize  int
	buckets   int // extra buckets (members, lease, auth, ...)
	// churn: after writing, delete every value with overflow pages, then
	// write churn more revisions into the freed pages (whose old headers
	// and old value bytes stay where nothing refers to them any more).
	churn int
}

func (d scanDB) write(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(p, 0o600, &bolt.Options{PageSize: d.pageSize})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, uint64(d.revs)))
	err = db.Update(func(tx *bolt.Tx) error {
		for i := range d.buckets {
			b, err := tx.CreateBucket([]byte{'b', byte('a' + i)})
			if err != nil {
				return err
			}
			for j := range 50 {
				if err := b.Put([]byte{byte(j)}, bytes.Repeat([]byte{1}, 100)); err != nil {
					return err
				}
			}
		}
		if !d.noMeta {
			mb, err := tx.CreateBucket([]byte("meta"))
			if err != nil {
				return err
			}
			if err := mb.Put([]byte("consistent_index"), make([]byte, 8)); err != nil {
				return err
			}
			if d.compacted > 0 {
				v := make([]byte, 8)
				binary.BigEndian.PutUint64(v, uint64(d.compacted))
				if err := mb.Put([]byte("finishedCompactRev"), v); err != nil {
					return err
				}
				if err := mb.Put([]byte("scheduledCompactRev"), v); err != nil {
					return err
				}
			}
		}
		if d.noKey {
			return nil
		}
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		kb.FillPercent = 0.9
		for r := 1; r <= d.revs; r++ {
			size := d.valueSize
			if d.bigEvery > 0 && r%d.bigEvery == 0 {
				size = 200 << 10
			}
			v := make([]byte, size)
			for i := range v {
				v[i] = byte(rng.IntN(256))
			}
			if err := kb.Put(revKey(int64(r), 0, r%97 == 0), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; d.churn > 0 && round < 3; round++ {
		err = db.Update(func(tx *bolt.Tx) error {
			kb := tx.Bucket([]byte("key"))
			var big [][]byte
			c := kb.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if len(v) > 4096 {
					big = append(big, bytes.Clone(k))
				}
			}
			for _, k := range big {
				if err := kb.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			kb := tx.Bucket([]byte("key"))
			base := d.revs + round*d.churn
			for r := base + 1; r <= base+d.churn; r++ {
				size := 300 + rng.IntN(3000)
				if r%7 == 0 {
					size = 20000 + rng.IntN(100000)
				}
				v := make([]byte, size)
				for i := range v {
					v[i] = byte(rng.IntN(256))
				}
				if err := kb.Put(revKey(int64(r), 0, false), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if d.deleteTo > 0 {
		err = db.Update(func(tx *bolt.Tx) error {
			kb := tx.Bucket([]byte("key"))
			for r := 1; r < d.deleteTo; r++ {
				if err := kb.Delete(revKey(int64(r), 0, r%97 == 0)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// snapshotOf is what etcd's snapshot streams of the database at p: bbolt's
// Tx.WriteTo (both meta pages rewritten from the transaction's, then every
// page in file order).
func snapshotOf(t *testing.T, p string) []byte {
	t.Helper()
	db, err := bolt.Open(p, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	if err := db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&buf); return err }); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// scan writes b to a scanner in pieces of random sizes (at most max),
// each from one buffer that is overwritten after every write, as the
// backup pipeline reuses its buffers: a scanner that kept a reference to
// what it was given reads garbage.
func scan(b []byte, max int, seed uint64) (int64, int64, error) {
	s := NewRevisionScanner()
	rng := rand.New(rand.NewPCG(seed, 7))
	piece := make([]byte, max)
	for len(b) > 0 {
		n := min(len(b), 1+rng.IntN(max))
		copy(piece, b[:n])
		s.Write(piece[:n])
		for i := range piece[:n] {
			piece[i] = 0xa5
		}
		b = b[n:]
	}
	return s.Result()
}

// TestRevisionScanner: on databases of etcd's shape (an inline key
// bucket, trees of one to three levels, values with overflow pages, freed
// pages after deletions, pages of 4 and 16 KB, no compaction, no meta
// bucket), the scanner fed the snapshot stream in pieces of any size
// returns what Revisions returns reading the file.
func TestRevisionScanner(t *testing.T) {
	for _, tc := range []struct {
		name string
		db   scanDB
	}{
		{"inline key bucket", scanDB{revs: 3, valueSize: 10}},
		{"empty key bucket", scanDB{revs: 0}},
		{"one leaf", scanDB{revs: 20, valueSize: 100, compacted: 5}},
		{"two levels", scanDB{revs: 2000, valueSize: 200, compacted: 1500, buckets: 4}},
		{"three levels", scanDB{revs: 30000, valueSize: 100, compacted: 29000, buckets: 2}},
		{"overflow values", scanDB{revs: 600, valueSize: 500, bigEvery: 50, compacted: 100}},
		{"last value overflows", scanDB{revs: 100, valueSize: 500, bigEvery: 100}},
		{"freed pages", scanDB{revs: 5000, valueSize: 300, deleteTo: 4000, compacted: 4000}},
		{"freed multi-page values, pages reused", scanDB{revs: 400, valueSize: 2000, bigEvery: 3, churn: 300, compacted: 3}},
		{"16 KB pages", scanDB{revs: 5000, valueSize: 300, compacted: 10, pageSize: 16384}},
		{"no meta bucket", scanDB{revs: 100, valueSize: 50, noMeta: true}},
		{"compacted beyond the last key", scanDB{revs: 100, valueSize: 50, compacted: 500}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.db.write(t)
			wantRev, wantCompacted, err := Revisions(p)
			if err != nil {
				t.Fatal(err)
			}
			stream := snapshotOf(t, p)
			if tc.db.revs >= 2000 {
				// The tree has branch pages: the walk down them is tested.
				s := NewRevisionScanner()
				s.Write(stream)
				if _, _, err := s.Result(); err != nil || len(s.branches) == 0 {
					t.Fatalf("%d branch pages (%v): want a tree of two levels at least", len(s.branches), err)
				}
			}
			for i, max := range []int{1 << 20, 4096, 1000, 17} {
				if max == 17 && len(stream) > 4<<20 {
					continue
				}
				rev, compacted, err := scan(stream, max, uint64(i))
				if err != nil || rev != wantRev || compacted != wantCompacted {
					t.Fatalf("pieces of up to %d bytes: scanner %d, %d, %v; Revisions %d, %d", max, rev, compacted, err, wantRev, wantCompacted)
				}
			}
		})
	}
}

// TestRevisionScannerRefusals: a stream that is not a whole bbolt
// database is an error wrapping ErrScan (or the key bucket's absence, as
// Revisions says it), never a revision.
func TestRevisionScannerRefusals(t *testing.T) {
	good := snapshotOf(t, scanDB{revs: 2000, valueSize: 200, compacted: 7}.write(t))
	noKey := snapshotOf(t, scanDB{noKey: true}.write(t))
	flip := func(at int) []byte {
		b := bytes.Clone(good)
		b[at] ^= 0xff
		return b
	}
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"empty", nil, "no valid meta page"},
		{"cut inside a page", good[:len(good)-100], "its meta page says"},
		{"a page missing at the end", good[:len(good)-4096], "its meta page says"},
		{"random bytes", bytes.Repeat([]byte{0x5a}, 64<<10), "page size"},
		{"both meta pages broken", append(flip(16 + 20)[:4096], flip(4096 + 16 + 20)[4096:]...), "no valid meta page"},
		{"no key bucket", noKey, "no key bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, _, err := scan(tc.stream, 5000, 1)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("scanner = %d, %v; want an error saying %q", rev, err, tc.want)
			}
			if tc.want != "no key bucket" && !errors.Is(err, ErrScan) {
				t.Errorf("%v does not wrap ErrScan", err)
			}
		})
	}
}

// FuzzRevisionScanner: any stream, in any pieces, gives a result or an
// error without panicking, and what it keeps stays within the input's
// size (memory follows the bytes written).
func FuzzRevisionScanner(f *testing.F) {
	dir := f.TempDir()
	for i, d := range []scanDB{{revs: 3, valueSize: 10, compacted: 2}, {revs: 60, valueSize: 100, compacted: 50, buckets: 1}} {
		p := filepath.Join(dir, string(rune('a'+i)))
		db, err := bolt.Open(p, 0o600, &bolt.Options{PageSize: 1024})
		if err != nil {
			f.Fatal(err)
		}
		_ = db.Update(func(tx *bolt.Tx) error {
			kb, _ := tx.CreateBucket([]byte("key"))
			mb, _ := tx.CreateBucket([]byte("meta"))
			v := make([]byte, 8)
			binary.BigEndian.PutUint64(v, uint64(d.compacted))
			_ = mb.Put([]byte("finishedCompactRev"), v)
			for r := 1; r <= d.revs; r++ {
				_ = kb.Put(revKey(int64(r), 0, false), make([]byte, d.valueSize))
			}
			return nil
		})
		var buf bytes.Buffer
		_ = db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&buf); return err })
		db.Close()
		f.Add(buf.Bytes(), uint16(1000))
	}
	f.Fuzz(func(t *testing.T, b []byte, piece uint16) {
		s := NewRevisionScanner()
		step := int(piece%8192) + 1
		for rest := b; len(rest) > 0; {
			n := min(step, len(rest))
			s.Write(rest[:n])
			rest = rest[n:]
		}
		_, _, _ = s.Result()
		kept := len(s.buf)
		for _, m := range []map[uint64][]byte{s.branches, s.buckets, s.lastKeys, s.compact} {
			for _, v := range m {
				kept += len(v)
			}
		}
		if kept > 4*len(b)+maxPageSize {
			t.Fatalf("kept %d bytes of a %d-byte stream", kept, len(b))
		}
	})
}
