package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The files under testdata/malformed are a real etcd 3.6 snapshot
// (good.db, 30 keys, compacted at 10) and copies with one byte of page 2's
// header changed (pN-oOFF-vVALUE.db); bbolt panics reading each of them.
var malformed = []string{"p2-o8-vff.db", "p2-o10-v7f.db", "p2-o12-vff.db"}

func TestInspectGood(t *testing.T) {
	info, err := Inspect(t.Context(), filepath.Join("testdata", "malformed", "good.db"))
	if err != nil {
		t.Fatalf("Inspect(good.db): %v", err)
	}
	if info.Revision != 31 || info.CompactRevision != 10 {
		t.Fatalf("Inspect(good.db) = revision %d, compacted %d; want 31, 10", info.Revision, info.CompactRevision)
	}
}

func TestInspectMalformedDoesNotPanic(t *testing.T) {
	for _, name := range malformed {
		t.Run(name, func(t *testing.T) {
			_, err := Inspect(t.Context(), filepath.Join("testdata", "malformed", name))
			if !errors.Is(err, ErrMalformedSnapshot) {
				t.Fatalf("Inspect(%s) = %v; want an error wrapping ErrMalformedSnapshot", name, err)
			}
			if strings.Contains(err.Error(), "goroutine ") {
				t.Fatalf("error quotes the panic's trace: %v", err)
			}
		})
	}
}

// TestFetchMalformedLeavesNothing stores each malformed snapshot, re-hashed
// (etcd's appended SHA-256 matches), encrypted, as a full backup whose
// manifest matches the object, and fetches it with Fetch (checked read
// only) and FetchDatabase (checked by an open for writing): a clear error,
// and no decrypted copy left at the destination.
func TestFetchMalformedLeavesNothing(t *testing.T) {
	key := &Key{}
	copy(key.b[:], bytes.Repeat([]byte{7}, 32))
	for _, name := range malformed {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "malformed", name))
			if err != nil {
				t.Fatal(err)
			}
			body := raw[:len(raw)-sha256.Size]
			sum := sha256.Sum256(body)
			raw = append(append([]byte(nil), body...), sum[:]...)
			store, err := NewLocalStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var obj bytes.Buffer
			size, digest, err := packStream(&obj, bytes.NewReader(raw), key, zstd.SpeedDefault)
			if err != nil {
				t.Fatal(err)
			}
			m := Manifest{ID: "full-x", Kind: KindFull, EndRevision: 31, Size: size, RawSize: int64(len(raw)), SHA256: digest,
				Compression: "zstd", Encryption: "aes-256-gcm", KeyID: key.ID(), Object: "full/full-x.db.zst.enc"}
			if err := store.Put(t.Context(), m.Object, &obj); err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				name  string
				fetch func(context.Context, Store, Manifest, *Key, string) error
			}{{"Fetch", Fetch}, {"FetchDatabase", FetchDatabase}} {
				dst := filepath.Join(t.TempDir(), "snap.db")
				err = f.fetch(t.Context(), store, m, key, dst)
				if !errors.Is(err, ErrMalformedSnapshot) {
					t.Fatalf("%s = %v; want an error wrapping ErrMalformedSnapshot", f.name, err)
				}
				if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s left %s behind (stat: %v)", f.name, dst, err)
				}
			}
		})
	}
}

// TestInspectCanceled: a check the caller cancels reports the
// cancellation, not a malformed snapshot (verify --all would otherwise
// list a good backup as malformed after an interrupt).
func TestInspectCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Inspect(ctx, filepath.Join("testdata", "malformed", malformed[0]))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrMalformedSnapshot) {
		t.Fatalf("Inspect with a canceled context = %v; want context.Canceled, not ErrMalformedSnapshot", err)
	}
}
