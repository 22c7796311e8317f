package backup

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestFetchDatabase: Fetch writes the snapshot with etcd's appended
// SHA-256, byte for byte, and FetchDatabase the database alone, ready to
// be written to: the same keyspace, with its freelist written (checked by
// an open for writing, so no later open walks it); both check that
// checksum as the bytes stream by; a snapshot whose checksum does not
// match, or that was cut, is refused by both and leaves nothing at dst.
func TestFetchDatabase(t *testing.T) {
	key := &Key{}
	copy(key.b[:], bytes.Repeat([]byte{9}, 32))
	good, err := os.ReadFile(filepath.Join("testdata", "malformed", "good.db"))
	if err != nil {
		t.Fatal(err)
	}
	body := good[:len(good)-sha256.Size]
	sum := sha256.Sum256(body)
	withSum := append(append([]byte(nil), body...), sum[:]...)
	bodyFile := filepath.Join(t.TempDir(), "body.db")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	badSum := append([]byte(nil), withSum...)
	badSum[len(badSum)-1] ^= 0xff
	tests := []struct {
		name    string
		stored  []byte
		keep    bool
		want    []byte // nil: refused
		wantErr string
	}{
		{"fetch keeps the checksum", withSum, true, withSum, ""},
		{"database alone", withSum, false, body, ""},
		{"fetch: checksum mismatch", badSum, true, nil, "checksum mismatch"},
		{"database: checksum mismatch", badSum, false, nil, "checksum mismatch"},
		{"fetch: cut", withSum[:len(withSum)-100], true, nil, "carries no etcd checksum"},
		{"database: cut", withSum[:len(withSum)-100], false, nil, "carries no etcd checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := NewLocalStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var obj bytes.Buffer
			size, digest, err := packStream(&obj, bytes.NewReader(tt.stored), key, zstd.SpeedDefault)
			if err != nil {
				t.Fatal(err)
			}
			m := Manifest{ID: "full-x", Kind: KindFull, EndRevision: 31, Size: size, RawSize: int64(len(tt.stored)), SHA256: digest,
				Compression: "zstd", Encryption: "aes-256-gcm", KeyID: key.ID(), Object: "full/full-x.db.zst.enc"}
			if err := store.Put(t.Context(), m.Object, &obj); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "snap.db")
			if tt.keep {
				err = Fetch(t.Context(), store, m, key, dst)
			} else {
				err = FetchDatabase(t.Context(), store, m, key, dst)
			}
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want one saying %q", err, tt.wantErr)
				}
				if _, serr := os.Stat(dst); !os.IsNotExist(serr) {
					t.Fatalf("refused fetch left %s (stat: %v)", dst, serr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.keep {
				got, err := os.ReadFile(dst)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tt.want) {
					t.Fatalf("dst holds %d bytes, want %d (the %s)", len(got), len(tt.want), tt.name)
				}
			} else {
				preparedLike(t, dst, bodyFile)
			}
			if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o600 {
				t.Fatalf("dst mode %v, want 0600", fi.Mode().Perm())
			}
		})
	}
}
