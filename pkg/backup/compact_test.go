package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/klauspost/compress/zstd"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestCompactionDue: a chain is due once its deltas reach either bound; a
// zero bound is no bound, and a chain without deltas is never due.
func TestCompactionDue(t *testing.T) {
	deltas := func(n int, size int64) Chain {
		c := Chain{Full: Manifest{ID: "f", Kind: KindFull}}
		for i := 0; i < n; i++ {
			c.Deltas = append(c.Deltas, Manifest{Kind: KindDelta, Size: size})
		}
		return c
	}
	tests := []struct {
		name  string
		chain Chain
		b     CompactBounds
		want  bool
	}{
		{"no bounds", deltas(100, 1<<20), CompactBounds{}, false},
		{"no deltas", deltas(0, 0), CompactBounds{Deltas: 1, Bytes: 1}, false},
		{"below the count", deltas(9, 10), CompactBounds{Deltas: 10}, false},
		{"at the count", deltas(10, 10), CompactBounds{Deltas: 10}, true},
		{"past the count", deltas(11, 10), CompactBounds{Deltas: 10}, true},
		{"below the size", deltas(3, 10), CompactBounds{Bytes: 31}, false},
		{"at the size", deltas(3, 10), CompactBounds{Bytes: 30}, true},
		{"size reached, count not", deltas(3, 10), CompactBounds{Deltas: 100, Bytes: 30}, true},
		{"count reached, size not", deltas(100, 1), CompactBounds{Deltas: 100, Bytes: 1 << 30}, true},
		{"neither reached", deltas(5, 1), CompactBounds{Deltas: 100, Bytes: 1 << 30}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CompactionDue(tt.chain, tt.b); got != tt.want {
				t.Errorf("CompactionDue(%d deltas of %d bytes, %+v) = %v, want %v",
					len(tt.chain.Deltas), ChainBytes(tt.chain), tt.b, got, tt.want)
			}
		})
	}
}

// compactStore is a store holding a real etcd 3.6 snapshot (testdata
// good.db, revision 31) as a full backup and two deltas continuing it to
// revision 50.
func compactStore(t *testing.T, key *Key, auth *AuthKey) (*LocalStore, Chain) {
	t.Helper()
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "malformed", "good.db"))
	if err != nil {
		t.Fatal(err)
	}
	body := raw[:len(raw)-sha256.Size]
	sum := sha256.Sum256(body)
	raw = append(append([]byte(nil), body...), sum[:]...)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var obj bytes.Buffer
	full := Manifest{ID: NewID(KindFull, now, 31), Kind: KindFull, ClusterID: "abc", Member: "etcd-1",
		StartRevision: 10, EndRevision: 31, EtcdVersion: "3.6.16", RawSize: int64(len(raw)), Compression: "zstd", CreatedAt: now}
	if key != nil {
		full.Encryption, full.KeyID = encAlgorithm, key.ID()
	}
	if full.Size, full.SHA256, err = packStream(&obj, bytes.NewReader(raw), key, zstd.SpeedFastest); err != nil {
		t.Fatal(err)
	}
	if err := putWithManifest(ctx, s, auth, &full, &obj); err != nil {
		t.Fatal(err)
	}
	var ds []Manifest
	for i, r := range [][2]int64{{32, 40}, {41, 50}} {
		body := testSegment(t, r[0], r[1])
		if i == 1 {
			body = historySegment(t)
		}
		d, err := PutDelta(ctx, s, key, auth, DeltaInfo{ClusterID: "abc", Member: "etcd-1", EtcdVersion: "3.6.16",
			Start: r[0], End: r[1], Events: int(r[1] - r[0] + 1), Now: now.Add(time.Duration(i+1) * time.Second)}, body)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	return s, BuildChain(append([]Manifest{full}, ds...), full)
}

// historySegment encodes revisions 41 to 50: k32 deleted, k33 put again,
// then new keys k43 to k50.
func historySegment(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewDeltaWriter(&buf)
	events := []struct {
		typ byte
		kv  mvccpb.KeyValue
	}{
		{'D', mvccpb.KeyValue{Key: []byte("k32"), ModRevision: 41}},
		{'P', mvccpb.KeyValue{Key: []byte("k33"), Value: []byte("v2"), CreateRevision: 33, ModRevision: 42, Version: 2}},
	}
	for rev := int64(43); rev <= 50; rev++ {
		events = append(events, struct {
			typ byte
			kv  mvccpb.KeyValue
		}{'P', mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%d", rev)), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}})
	}
	for _, ev := range events {
		if err := w.Event(ev.typ, 0, &ev.kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// keyRecords counts the records of a database's key bucket and reports
// whether any holds key.
func keyRecords(t *testing.T, path, key string) (n int, holds bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("key")).ForEach(func(_, v []byte) error {
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return err
			}
			n++
			holds = holds || string(kv.Key) == key
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, holds
}

// replayDigest is the keyspace digest of a chain replayed as a restore
// does it: the full backup fetched, its deltas applied.
func replayDigest(t *testing.T, s Store, key *Key, c Chain) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "replay.db")
	if err := FetchDatabase(t.Context(), s, c.Full, key, db); err != nil {
		t.Fatal(err)
	}
	if len(c.Deltas) > 0 {
		if _, err := Apply(t.Context(), s, key, db, c.Full.EndRevision, c.Deltas, ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := KeyspaceDigest(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCompact: the chain folded is an authenticated full backup at the
// chain's end, listed like any other, that restores (alone) to the same
// keyspace as the chain replayed; the chain itself is left in the store.
// Plain and encrypted stores.
func TestCompact(t *testing.T) {
	for _, tc := range []struct {
		name, compression string
		key               *Key
		lineage           Lineage // the chain's timeline (zero: 1)
	}{
		{name: "plain"},
		{name: "encrypted", key: testKey(t)},
		{name: "stored as it is", compression: CompressionNone},
		{name: "stored as it is, encrypted", compression: CompressionNone, key: testKey(t)},
		{name: "a chain of timeline 3", lineage: Lineage{Timeline: 3, ParentTimeline: 1, BranchRevision: 5}},
	} {
		key := tc.key
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			auth := testAuthKey(3)
			s, chain := compactStore(t, key, auth)
			if len(chain.Deltas) != 2 || chain.End != 50 {
				t.Fatalf("test chain: %d deltas to %d", len(chain.Deltas), chain.End)
			}
			want := replayDigest(t, s, key, chain)
			chain.Full.Lineage = tc.lineage
			res, err := Compact(ctx, s, CompactOptions{Chain: chain, Key: key, Auth: auth, TempDir: t.TempDir(), Compression: tc.compression})
			if err != nil {
				t.Fatal(err)
			}
			m := res.Backup
			if wantC := map[bool]string{true: "none", false: "zstd"}[tc.compression == CompressionNone]; m.Compression != wantC {
				t.Fatalf("compacted backup compression %q, want %q", m.Compression, wantC)
			}
			if m.Kind != KindFull || m.EndRevision != 50 || m.StartRevision != 50 || m.CompactedFrom != chain.Full.ID || m.SnapshotHash == 0 {
				t.Fatalf("compacted manifest: %+v", m)
			}
			if m.Lineage != tc.lineage {
				t.Fatalf("compacted backup of timeline %+v, want the chain's %+v", m.Lineage, tc.lineage)
			}
			if (m.Encryption != "") != (key != nil) {
				t.Fatalf("compacted backup encryption %q with key %v", m.Encryption, key != nil)
			}
			if res.Digest != want {
				t.Fatalf("Compact reports digest %s, the chain replayed has %s", res.Digest, want)
			}
			l, err := List(ctx, s, ListOptions{Key: auth})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Ignored) != 0 || len(l.Backups) != 4 {
				t.Fatalf("after compaction: %d backups, ignored %v", len(l.Backups), l.Ignored)
			}
			latest, err := l.Find("latest", s.String())
			if err != nil || latest.ID != m.ID {
				t.Fatalf("latest full backup = %s (%v), want the compacted %s", latest.ID, err, m.ID)
			}
			after := BuildChain(l.Backups, latest)
			if len(after.Deltas) != 0 || after.End != 50 {
				t.Fatalf("chain of the compacted backup: %d deltas to %d", len(after.Deltas), after.End)
			}
			if got := replayDigest(t, s, key, after); got != want {
				t.Fatalf("restore from the compacted backup: digest %s, from the chain %s", got, want)
			}
			// The history is compacted away: one record per live key (the
			// replayed chain holds k33 twice and k32's put and deletion).
			folded := filepath.Join(t.TempDir(), "folded.db")
			if err := FetchDatabase(ctx, s, m, key, folded); err != nil {
				t.Fatal(err)
			}
			replayed := filepath.Join(t.TempDir(), "replayed.db")
			if err := FetchDatabase(ctx, s, chain.Full, key, replayed); err != nil {
				t.Fatal(err)
			}
			if _, err := Apply(ctx, s, key, replayed, chain.Full.EndRevision, chain.Deltas, ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			nFolded, holds32 := keyRecords(t, folded, "k32")
			nReplayed, _ := keyRecords(t, replayed, "k32")
			if holds32 || nFolded != nReplayed-3 {
				t.Errorf("folded key bucket: %d records (k32 held: %v), the replayed chain's %d; want 3 fewer, k32 gone", nFolded, holds32, nReplayed)
			}
			// The keyspace really grew: the digest is not that of the full
			// backup alone.
			if alone := replayDigest(t, s, key, Chain{Full: chain.Full}); alone == want {
				t.Fatal("the deltas did not change the keyspace digest")
			}
		})
	}
}

// TestCompactFailureStoresNothing: a chain that cannot be replayed (a
// delta's object damaged), a fence that refuses, and a canceled context
// each fail the compaction and leave the store's backups as they were.
func TestCompactFailureStoresNothing(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(t *testing.T, s *LocalStore, c Chain)
		fence   func() error
		cancel  bool
		wantErr string
	}{
		{name: "damaged delta", edit: func(t *testing.T, s *LocalStore, c Chain) {
			writeObject(t, s, c.Deltas[1].Object, []byte("not the delta"))
		}, wantErr: "is corrupt"},
		{name: "fence refuses", fence: func() error { return ErrNoAuthKey }, wantErr: ErrNoAuthKey.Error()},
		{name: "canceled", cancel: true, wantErr: "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := testAuthKey(3)
			s, chain := compactStore(t, nil, auth)
			if tt.edit != nil {
				tt.edit(t, s, chain)
			}
			ctx := t.Context()
			if tt.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			before, err := s.List(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = Compact(ctx, s, CompactOptions{Chain: chain, Auth: auth, TempDir: t.TempDir(), Fence: tt.fence})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Compact = %v, want an error containing %q", err, tt.wantErr)
			}
			after, err := s.List(t.Context(), "")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("a failed compaction changed the store:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestCompactNeedsDeltas: a full backup without deltas is not compacted.
func TestCompactNeedsDeltas(t *testing.T) {
	auth := testAuthKey(3)
	s, chain := compactStore(t, nil, auth)
	if _, err := Compact(t.Context(), s, CompactOptions{Chain: Chain{Full: chain.Full}, Auth: auth}); err == nil || !strings.Contains(err.Error(), "nothing to fold") {
		t.Fatalf("Compact without deltas = %v", err)
	}
}

// writeObject replaces a stored object's bytes (a damaged store).
func writeObject(t *testing.T, s *LocalStore, name string, b []byte) {
	t.Helper()
	p, err := s.path(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCompactStopsWhenCanceled: the folding steps honour their context (a
// backup leader that loses its leadership waits for its compaction before
// it resigns, and the next leader's campaign waits for that): a canceled
// one stops the database compaction and the digest at once.
func TestCompactStopsWhenCanceled(t *testing.T) {
	s, chain := compactStore(t, nil, testAuthKey(3))
	db := filepath.Join(t.TempDir(), "replay.db")
	if err := FetchDatabase(t.Context(), s, chain.Full, nil, db); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := compactDatabase(ctx, db, filepath.Join(t.TempDir(), "compacted.db"), chain.Full.EndRevision); !errors.Is(err, context.Canceled) {
		t.Errorf("compactDatabase canceled: %v", err)
	}
	if _, _, err := packFile(ctx, filepath.Join(t.TempDir(), "packed"), db, nil, zstd.SpeedFastest); !errors.Is(err, context.Canceled) {
		t.Errorf("packFile canceled: %v", err)
	}
	if _, err := appendChecksum(ctx, db); !errors.Is(err, context.Canceled) {
		t.Errorf("appendChecksum canceled: %v", err)
	}
}
