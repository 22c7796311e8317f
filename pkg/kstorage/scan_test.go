package kstorage

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/pkg/backup"
)

// event is one revision of etcd's key bucket.
type event struct {
	rev, sub int64
	key      string
	value    []byte
	del      bool
}

// writeEtcdDB writes a bbolt database in etcd's backend layout: bucket
// "key" maps revisions (8 bytes main, '_', 8 bytes sub, 't' for a
// deletion) to mvccpb.KeyValue records; bucket "meta" holds the finished
// compaction revision.
func writeEtcdDB(t *testing.T, path string, compacted int64, evs []event) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		if compacted > 0 {
			v := make([]byte, 17)
			binary.BigEndian.PutUint64(v, uint64(compacted))
			v[8] = '_'
			if err := mb.Put([]byte("finishedCompactRev"), v); err != nil {
				return err
			}
		}
		for _, e := range evs {
			k := make([]byte, 17, 18)
			binary.BigEndian.PutUint64(k, uint64(e.rev))
			k[8] = '_'
			binary.BigEndian.PutUint64(k[9:], uint64(e.sub))
			kv := mvccpb.KeyValue{Key: []byte(e.key), ModRevision: e.rev, CreateRevision: e.rev, Version: 1, Value: e.value}
			if e.del {
				k = append(k, 't')
				kv = mvccpb.KeyValue{Key: []byte(e.key)}
			}
			b, err := kv.Marshal()
			if err != nil {
				return err
			}
			if err := kb.Put(k, b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var (
	cmV1      = protoEnvelope("v1", "ConfigMap", []byte("data"))
	cmV1Big   = protoEnvelope("v1", "ConfigMap", bytes.Repeat([]byte("d"), 1000))
	secretEnc = []byte("k8s:enc:aescbc:v1:key1:ciphertext")
	widget    = []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`)
)

// history: a updated after the compaction, b deleted after it, c deleted
// and re-created, w2 created and deleted, keys outside the prefix and a
// non-object key.
func history() []event {
	return []event{
		{rev: 2, key: "/registry/configmaps/ns/a", value: cmV1},
		{rev: 3, key: "/registry/configmaps/ns/b", value: cmV1},
		{rev: 4, key: "/registry/secrets/ns/s", value: secretEnc},
		{rev: 5, key: "/registry/configmaps/ns/c", value: cmV1},
		{rev: 6, key: "/registry/configmaps/ns/a", value: cmV1Big},
		{rev: 7, key: "/registry/configmaps/ns/b", del: true},
		{rev: 8, key: "/registry/example.com/widgets/ns/w", value: widget},
		{rev: 9, sub: 0, key: "/registry/health", value: []byte(`{"health":"true"}`)},
		{rev: 9, sub: 1, key: "compact_rev_key", value: []byte("9")},
		{rev: 10, key: "/registry/example.com/widgets/ns/w2", value: widget},
		{rev: 11, key: "/registry/example.com/widgets/ns/w2", del: true},
		{rev: 12, key: "/registry/configmaps/ns/c", del: true},
		{rev: 13, key: "/registry/configmaps/ns/c", value: cmV1},
		{rev: 14, key: "/other/configmaps/ns/x", value: cmV1},
	}
}

func wantHistoryReport(t *testing.T, rep Report) {
	t.Helper()
	want := map[string]ResourceReport{
		"configmaps": {Resource: "configmaps", Path: "configmaps", Objects: 2, Bytes: int64(len(cmV1Big) + len(cmV1)), PlainObjects: 2,
			Versions: []VersionReport{{APIVersion: "v1", Kind: "ConfigMap", Format: FormatProtobuf, Objects: 2, Bytes: int64(len(cmV1Big) + len(cmV1))}}, Encryption: []EncryptionReport{}},
		"secrets": {Resource: "secrets", Path: "secrets", Objects: 1, Bytes: int64(len(secretEnc)), EncryptedObjects: 1, Versions: []VersionReport{},
			Encryption: []EncryptionReport{{Provider: "aescbc", PrefixVersion: "v1", KeyName: "key1", Objects: 1, Bytes: int64(len(secretEnc))}}},
		"widgets.example.com": {Resource: "widgets.example.com", Path: "example.com/widgets", Objects: 1, Bytes: int64(len(widget)), PlainObjects: 1,
			Versions: []VersionReport{{APIVersion: "example.com/v1", Kind: "Widget", Format: FormatJSON, Objects: 1, Bytes: int64(len(widget))}}, Encryption: []EncryptionReport{}},
	}
	if len(rep.Resources) != len(want) {
		t.Fatalf("resources: %+v", rep.Resources)
	}
	for _, r := range rep.Resources {
		w := want[r.Resource]
		if !equalJSON(t, r, w) {
			t.Errorf("resource %s:\n got %+v\nwant %+v", r.Resource, r, w)
		}
	}
	if rep.OtherKeys != (Count{Objects: 1, Bytes: int64(len(`{"health":"true"}`))}) {
		t.Errorf("other keys: %+v", rep.OtherKeys)
	}
	wantTotals := Totals{Resources: 3, Objects: 4, Bytes: int64(len(cmV1Big) + len(cmV1) + len(secretEnc) + len(widget)), PlainObjects: 3, EncryptedObjects: 1}
	if rep.Totals != wantTotals {
		t.Errorf("totals %+v, want %+v", rep.Totals, wantTotals)
	}
}

func TestScanSnapshot(t *testing.T) {
	for _, compacted := range []int64{0, 5, 14} {
		dir := t.TempDir()
		p := filepath.Join(dir, "db")
		evs := history()
		if compacted == 14 {
			// A compaction at 14 keeps only each live key's newest revision.
			evs = []event{
				{rev: 4, key: "/registry/secrets/ns/s", value: secretEnc},
				{rev: 6, key: "/registry/configmaps/ns/a", value: cmV1Big},
				{rev: 8, key: "/registry/example.com/widgets/ns/w", value: widget},
				{rev: 9, sub: 0, key: "/registry/health", value: []byte(`{"health":"true"}`)},
				{rev: 9, sub: 1, key: "compact_rev_key", value: []byte("9")},
				{rev: 13, key: "/registry/configmaps/ns/c", value: cmV1},
				{rev: 14, key: "/other/configmaps/ns/x", value: cmV1},
			}
		}
		writeEtcdDB(t, p, compacted, evs)
		inv := NewInventory("/registry/")
		info, err := ScanSnapshot(context.Background(), p, inv)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != 14 || info.CompactRevision != compacted {
			t.Errorf("compacted %d: info %+v", compacted, info)
		}
		wantHistoryReport(t, inv.Report(Source{Type: "snapshot", Revision: info.Revision}))
	}
}

// TestScanSnapshotWithChecksum: the file etcdctl snapshot save writes has
// a SHA-256 appended to the database.
func TestScanSnapshotWithChecksum(t *testing.T) {
	p := filepath.Join(t.TempDir(), "snap.db")
	writeEtcdDB(t, p, 5, history())
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{0xab}, 32)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	inv := NewInventory("/registry")
	if _, err := ScanSnapshot(context.Background(), p, inv); err != nil {
		t.Fatal(err)
	}
	wantHistoryReport(t, inv.Report(Source{}))
}

func TestScanSnapshotBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noKey := filepath.Join(dir, "nokey.db")
	db, err := bolt.Open(noKey, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("plans")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	notRevs := filepath.Join(dir, "notrevs.db")
	db, err = bolt.Open(notRevs, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		return b.Put([]byte("hello"), []byte("world"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, tc := range []struct {
		name, path, want string
		notSnapshot      bool
	}{
		{"text file", write("notes.txt", []byte("these are not the bytes you are looking for\n")), "not a bbolt database", true},
		{"random bytes", write("random.bin", bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 2000)), "not a bbolt database", true},
		{"empty file", write("empty.db", nil), "the file is empty", true},
		{"bbolt without key bucket", noKey, `no "key" bucket`, true},
		{"bbolt key bucket without revisions", notRevs, "is not a revision", true},
		{"directory", dir, "is a directory", true},
		{"missing file", filepath.Join(dir, "missing.db"), "missing.db does not exist", false},
	} {
		_, err := ScanSnapshot(context.Background(), tc.path, NewInventory("/registry"))
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotSnapshot) != tc.notSnapshot ||
			tc.notSnapshot && !strings.Contains(err.Error(), tc.path+" is not an etcd snapshot") && !strings.Contains(err.Error(), "is a directory, not an etcd snapshot") {
			t.Errorf("%s: %v; want an error with %q (not a snapshot: %v)", tc.name, err, tc.want, tc.notSnapshot)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// TestScanSnapshotRestoreMarker: a restore (backup.BumpRevision, as
// etcdutl's --bump-revision) writes an empty record at the bumped
// revision; a snapshot of the restored cluster holds it, as its newest
// revision or below the writes made after the restore. It is no key, so it
// is skipped; an empty record anywhere else (a deletion's key, a
// sub-revision) is still malformed.
func TestScanSnapshotRestoreMarker(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db")
	writeEtcdDB(t, p, 0, history())
	bumped, err := backup.BumpRevision(p, 1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	inv := NewInventory("/registry/")
	info, err := ScanSnapshot(context.Background(), p, inv)
	if err != nil {
		t.Fatalf("a restored database: %v", err)
	}
	if info.Revision != bumped {
		t.Errorf("revision %d, want the bumped %d", info.Revision, bumped)
	}
	wantHistoryReport(t, inv.Report(Source{Type: "snapshot", Revision: info.Revision}))

	// Writes after the restore: the marker is no longer the newest record.
	after := filepath.Join(t.TempDir(), "db")
	evs := append(history(), event{rev: bumped + 1, key: "/registry/configmaps/ns/d", value: cmV1})
	writeEtcdDB(t, after, 0, evs)
	putRaw(t, after, revKey(bumped, 0, false), nil)
	inv = NewInventory("/registry/")
	if info, err = ScanSnapshot(context.Background(), after, inv); err != nil {
		t.Fatalf("a restored database written to since: %v", err)
	}
	if info.Revision != bumped+1 || inv.Report(Source{}).Totals.Objects != 5 {
		t.Errorf("written to since the restore: revision %d, %d objects; want %d and 5", info.Revision, inv.Report(Source{}).Totals.Objects, bumped+1)
	}

	for name, k := range map[string][]byte{
		"empty deletion":    revKey(bumped+5, 0, true),
		"empty sub-revison": revKey(bumped+5, 1, false),
	} {
		bad := filepath.Join(t.TempDir(), "db")
		writeEtcdDB(t, bad, 0, history())
		putRaw(t, bad, k, nil)
		if _, err := ScanSnapshot(context.Background(), bad, NewInventory("/registry/")); err == nil || !strings.Contains(err.Error(), "malformed key-value record") {
			t.Errorf("%s: %v, want a malformed record", name, err)
		}
	}
}

// revKey is etcd's key of a revision ('t' appended for a deletion).
func revKey(main, sub int64, del bool) []byte {
	k := make([]byte, 17, 18)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], uint64(sub))
	if del {
		k = append(k, 't')
	}
	return k
}

// putRaw writes one record into the key bucket as it is.
func putRaw(t *testing.T, path string, k, v []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("key")).Put(k, v) }); err != nil {
		t.Fatal(err)
	}
}
