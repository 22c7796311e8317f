package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func testAuthKey(b byte) *AuthKey {
	var k [32]byte
	for i := range k {
		k[i] = b
	}
	return NewAuthKey(k)
}

// testSegment encodes puts of revisions from..to.
func testSegment(t *testing.T, from, to int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewDeltaWriter(&buf)
	for rev := from; rev <= to; rev++ {
		kv := mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%d", rev)), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := w.Event('P', 0, &kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sealedManifest(t *testing.T, k *AuthKey) Manifest {
	t.Helper()
	m := Manifest{
		ID: "20260101T000000.000Z-delta-r5-9", Kind: KindDelta, ClusterID: "abc", Member: "etcd-1",
		StartRevision: 5, EndRevision: 9, EtcdVersion: "3.6.16", Size: 10, RawSize: 20,
		SHA256: strings.Repeat("ab", 32), TotalKeys: 5, Compression: "zstd",
		CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	m.Object = ObjectName(m.Kind, m.ID, false)
	k.Seal(&m)
	return m
}

// TestParseManifest: a sealed manifest verifies; any changed field, another
// key, a missing MAC, an object that is not the ID's, and an ID that does
// not name the manifest's range are each refused with the matching error.
func TestParseManifest(t *testing.T) {
	k := testAuthKey(1)
	good := sealedManifest(t, k)
	enc := func(m Manifest) []byte { b, _ := json.Marshal(m); return b }
	if got, err := ParseManifest(enc(good), k); err != nil || got.MAC != good.MAC {
		t.Fatalf("sealed manifest: %v", err)
	}
	tests := []struct {
		name   string
		change func(m *Manifest)
		key    *AuthKey
		want   error
	}{
		{"end revision raised", func(m *Manifest) {
			m.EndRevision, m.ID = 999999999999, "20260101T000000.000Z-delta-r5-999999999999"
			m.Object = ObjectName(m.Kind, m.ID, false)
		}, k, ErrBadMAC},
		{"created in 2030", func(m *Manifest) { m.CreatedAt = m.CreatedAt.AddDate(4, 0, 0) }, k, ErrBadMAC},
		{"cluster", func(m *Manifest) { m.ClusterID = "def" }, k, ErrBadMAC},
		{"sha256", func(m *Manifest) { m.SHA256 = strings.Repeat("cd", 32) }, k, ErrBadMAC},
		{"raw size", func(m *Manifest) { m.RawSize = 1 << 40 }, k, ErrBadMAC},
		{"mac key id", func(m *Manifest) { m.MACKeyID = "0000000000000000" }, k, ErrUnknownKey},
		{"another key", func(*Manifest) {}, testAuthKey(2), ErrUnknownKey},
		{"no key", func(*Manifest) {}, nil, ErrUnknownKey},
		{"mac changed", func(m *Manifest) { m.MAC = strings.Repeat("00", 32) }, k, ErrBadMAC},
		{"no mac", func(m *Manifest) { m.MAC, m.MACKeyID, m.Format = "", "", 0 }, k, ErrUnauthenticated},
		{"mac removed, format kept", func(m *Manifest) { m.MAC = "" }, k, ErrBadMAC},
		{"object of another backup", func(m *Manifest) { m.Object = "full/20250101T000000.000Z-full-r3.db.zst" }, k, ErrBadManifest},
		{"id not its range", func(m *Manifest) { m.StartRevision = 6 }, k, ErrBadManifest},
		{"unknown kind", func(m *Manifest) { m.Kind = "other" }, k, ErrBadManifest},
		{"bad sha", func(m *Manifest) { m.SHA256 = "x" }, k, ErrBadManifest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			tc.change(&m)
			got, err := ParseManifest(enc(m), tc.key)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != ErrUnauthenticated && tc.want != ErrUnknownKey && got.ID != "" {
				t.Errorf("a refused manifest was returned: %+v", got)
			}
		})
	}
	for _, b := range []string{"", "{", "null", `{"id":1}`, `[]`} {
		if _, err := ParseManifest([]byte(b), k); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%q: %v, want ErrBadManifest", b, err)
		}
	}
}

// TestListSkipsAndReports: one corrupt, one forged and one unauthenticated
// manifest do not hide the good backup, and each is named with its reason;
// AllowUnauthenticated trusts the old one, never the forged one.
func TestListSkipsAndReports(t *testing.T) {
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testAuthKey(1)
	good, err := PutDelta(ctx, s, nil, k, DeltaInfo{ClusterID: "abc", Start: 5, End: 7, Events: 3, Now: time.Now()}, testSegment(t, 5, 7))
	if err != nil {
		t.Fatal(err)
	}
	forged := good
	forged.ID, forged.StartRevision, forged.EndRevision = "20300101T000000.000Z-delta-r8-999999999999", 8, 999999999999
	forged.Object = ObjectName(KindDelta, forged.ID, false)
	legacy := good
	legacy.ID, legacy.StartRevision, legacy.EndRevision = "20200101T000000.000Z-delta-r1-4", 1, 4
	legacy.Object = ObjectName(KindDelta, legacy.ID, false)
	legacy.MAC, legacy.MACKeyID, legacy.Format = "", "", 0
	for name, m := range map[string]Manifest{"forged": forged, "legacy": legacy} {
		b, _ := json.Marshal(m)
		if err := s.Put(ctx, manifestName(m.Kind, m.ID), bytes.NewReader(b)); err != nil {
			t.Fatal(name, err)
		}
	}
	if err := s.Put(ctx, "full/20260101T000000.000Z-full-r3.json", strings.NewReader("{not json")); err != nil {
		t.Fatal(err)
	}
	l, err := List(ctx, s, ListOptions{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Backups) != 1 || l.Backups[0].ID != good.ID {
		t.Errorf("trusted: %v, want only %s", l.Backups, good.ID)
	}
	reasons := map[string]error{}
	for _, i := range l.Ignored {
		reasons[i.Name] = i.Err
	}
	for name, want := range map[string]error{
		manifestName(KindDelta, forged.ID):       ErrBadMAC,
		manifestName(KindDelta, legacy.ID):       ErrUnauthenticated,
		"full/20260101T000000.000Z-full-r3.json": ErrBadManifest,
	} {
		if !errors.Is(reasons[name], want) {
			t.Errorf("%s: %v, want %v", name, reasons[name], want)
		}
	}
	l, err = List(ctx, s, ListOptions{Key: k, AllowUnauthenticated: true})
	if err != nil || len(l.Backups) != 2 || len(l.Ignored) != 2 {
		t.Errorf("allow unauthenticated: %d trusted, %d ignored (%v), want 2 and 2", len(l.Backups), len(l.Ignored), err)
	}
}

// TestPutNeedsAuthKey: nothing is stored without the key.
func TestPutNeedsAuthKey(t *testing.T) {
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = PutDelta(t.Context(), s, nil, nil, DeltaInfo{ClusterID: "abc", Start: 1, End: 1, Events: 1, Now: time.Now()}, testSegment(t, 1, 1))
	if !errors.Is(err, ErrNoAuthKey) {
		t.Fatalf("got %v, want ErrNoAuthKey", err)
	}
	if names, _ := s.List(t.Context(), ""); len(names) != 0 {
		t.Errorf("stored %v", names)
	}
}

// zstdOf compresses b.
func zstdOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if _, _, err := packStream(&out, bytes.NewReader(b), nil, zstd.SpeedDefault); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestBombIsNotDecompressed: an object swapped for a small zstd stream
// that expands to 64 MiB, manifest unchanged, is refused on its SHA-256
// before anything is decompressed, and the temporary copy is gone.
func TestBombIsNotDecompressed(t *testing.T) {
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testAuthKey(1)
	m, err := PutDelta(ctx, s, nil, k, DeltaInfo{ClusterID: "abc", Start: 5, End: 7, Events: 3, Now: time.Now()}, testSegment(t, 5, 7))
	if err != nil {
		t.Fatal(err)
	}
	bomb := zstdOf(t, make([]byte, 64<<20))
	if err := os.WriteFile(filepath.Join(s.Dir, m.Object), bomb, 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	err = VerifyDelta(ctx, s, m, nil, tmp)
	if err == nil || !strings.Contains(err.Error(), "not decompressed") {
		t.Fatalf("got %v, want a SHA-256 refusal before decompression", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestOutputCappedAtRawSize: an object whose manifest verifies (a key
// holder's mistake, or an old manifest trusted deliberately) but which
// expands past its raw size is refused at the raw size, never written out.
func TestOutputCappedAtRawSize(t *testing.T) {
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testAuthKey(1)
	body := append(testSegment(t, 5, 7), make([]byte, 32<<20)...) // zeros after the events
	var packed bytes.Buffer
	size, sum, err := packStream(&packed, bytes.NewReader(body), nil, zstd.SpeedDefault)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{ID: "20260101T000000.000Z-delta-r5-7", Kind: KindDelta, ClusterID: "abc", StartRevision: 5, EndRevision: 7,
		Size: size, SHA256: sum, RawSize: 4096, Compression: "zstd", CreatedAt: time.Now().UTC()}
	if err := putWithManifest(ctx, s, k, &m, bytes.NewReader(packed.Bytes())); err != nil {
		t.Fatal(err)
	}
	r, finish, closeFn, err := openObject(ctx, s, m, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	var out bytes.Buffer
	_, err = out.ReadFrom(r)
	if err == nil {
		err = finish()
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if out.Len() > 4096 {
		t.Errorf("read %d bytes past the raw size 4096", out.Len())
	}
}

// TestApplyChecksDeltaRange: a delta whose manifest claims fewer revisions
// than it holds (5 to 7 of 5 to 9) is refused by Apply, not replayed.
func TestApplyChecksDeltaRange(t *testing.T) {
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testAuthKey(1)
	m, err := PutDelta(ctx, s, nil, k, DeltaInfo{ClusterID: "abc", Start: 5, End: 7, Events: 5, Now: time.Now()}, testSegment(t, 5, 9))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "db")
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"key", "lease"} {
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Apply(ctx, s, nil, db, 4, []Manifest{m}, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "holds revisions 5 to 9, but its manifest says 5 to 7") {
		t.Fatalf("got %v", err)
	}
	if err := VerifyDelta(ctx, s, m, nil, t.TempDir()); err == nil {
		t.Error("VerifyDelta accepted the false range")
	}
}

// TestVerifyDeltaChecksContinuity: a segment whose range matches its
// manifest but that skips a revision inside (5 to 9 without 7) fails
// verification, as it would fail a restore (the delta reader checks that
// each event follows the one before).
func TestVerifyDeltaChecksContinuity(t *testing.T) {
	ctx := t.Context()
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := NewDeltaWriter(&buf)
	for _, rev := range []int64{5, 6, 8, 9} {
		kv := mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%d", rev)), Value: []byte("v"), CreateRevision: rev, ModRevision: rev, Version: 1}
		if err := w.Event('P', 0, &kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	seg := buf.Bytes()
	m, err := PutDelta(ctx, s, nil, testAuthKey(1), DeltaInfo{ClusterID: "abc", Start: 5, End: 9, Events: 4, Now: time.Now()}, seg)
	if err != nil {
		t.Fatal(err)
	}
	err = VerifyDelta(ctx, s, m, nil, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "event at revision 8.0 follows 6.0") {
		t.Fatalf("VerifyDelta of a segment without revision 7: %v", err)
	}
	whole, err := PutDelta(ctx, s, nil, testAuthKey(1), DeltaInfo{ClusterID: "abc", Start: 5, End: 9, Events: 5, Now: time.Now().Add(time.Second)}, testSegment(t, 5, 9))
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyDelta(ctx, s, whole, nil, t.TempDir()); err != nil {
		t.Fatalf("VerifyDelta of a whole segment: %v", err)
	}
}

// TestDeltaReaderErrors: a truncated event length says so, with its cause.
func TestDeltaReaderErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"truncated length": {append([]byte(deltaMagic), 'P', 0), "event length: unexpected EOF"},
		"huge length":      {append([]byte(deltaMagic), 'P', 0, 0xff, 0xff, 0xff, 0xff, 0x7f), "exceeds the limit"},
	} {
		dr, err := NewDeltaReader(bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = dr.Next()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "%!") {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestCheckManifestCompression: a full backup stored without compression
// ("none") names an object ending in .db and, unencrypted, holds exactly
// its raw size; "none" for a delta, a .db.zst name for it, another size,
// and an unknown compression are each refused.
func TestCheckManifestCompression(t *testing.T) {
	full := func(change func(m *Manifest)) *Manifest {
		m := &Manifest{
			ID: "20260101T000000.000Z-full-r9", Kind: KindFull, StartRevision: 1, EndRevision: 9,
			Size: 4128, RawSize: 4128, SHA256: strings.Repeat("ab", 32), Compression: CompressionNone,
			CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Object: "full/20260101T000000.000Z-full-r9.db",
		}
		change(m)
		return m
	}
	for _, tc := range []struct {
		name string
		m    *Manifest
		ok   bool
	}{
		{"none", full(func(*Manifest) {}), true},
		{"none, encrypted", full(func(m *Manifest) {
			m.Encryption, m.KeyID, m.Size = encAlgorithm, "k", 4200
			m.Object += ".enc"
		}), true},
		{"zstd", full(func(m *Manifest) { m.Compression, m.Size, m.Object = "zstd", 300, m.Object+".zst" }), true},
		{"none named .db.zst", full(func(m *Manifest) { m.Object += ".zst" }), false},
		{"zstd named .db", full(func(m *Manifest) { m.Compression = "zstd" }), false},
		{"none, size not the raw size", full(func(m *Manifest) { m.Size = 100 }), false},
		{"none for a delta", full(func(m *Manifest) {
			m.Kind, m.ID = KindDelta, "20260101T000000.000Z-delta-r1-9"
			m.Object = "delta/" + m.ID + ".delta"
		}), false},
		{"unknown", full(func(m *Manifest) { m.Compression = "gzip" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkManifest(tc.m)
			if tc.ok != (err == nil) {
				t.Fatalf("checkManifest = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadManifest) {
				t.Fatalf("%v, want ErrBadManifest", err)
			}
		})
	}
}
