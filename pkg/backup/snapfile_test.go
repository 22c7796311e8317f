package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goodSnapshot is a real etcd 3.6 snapshot as `etcdctl snapshot save`
// writes it (the database, then its SHA-256): revision 31, compacted at 10.
var goodSnapshot = filepath.Join("testdata", "malformed", "good.db")

func readGood(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(goodSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportSnapshot(t *testing.T) {
	good := readGood(t)
	dst := filepath.Join(t.TempDir(), "db")
	info, err := ImportSnapshot(t.Context(), goodSnapshot, dst)
	if err != nil {
		t.Fatalf("ImportSnapshot(good.db): %v", err)
	}
	if info.Revision != 31 || info.CompactRevision != 10 {
		t.Errorf("ImportSnapshot(good.db) = revision %d, compacted %d; want 31, 10", info.Revision, info.CompactRevision)
	}
	// The database without the hash, its freelist written by the check's
	// open for writing (the revision bump opens it next).
	body := filepath.Join(t.TempDir(), "body.db")
	if err := os.WriteFile(body, good[:len(good)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	preparedLike(t, dst, body)
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o600 {
		t.Errorf("imported database mode %o, want 600", fi.Mode().Perm())
	}
	if after := readGood(t); !bytes.Equal(after, good) {
		t.Error("the snapshot file changed")
	}
}

// TestImportSnapshotRefuses: each bad file is refused with one error of
// the expected kind, and nothing is left at the destination.
func TestImportSnapshotRefuses(t *testing.T) {
	good := readGood(t)
	body := good[:len(good)-sha256.Size]
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		return b
	}
	rehashed := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join("testdata", "malformed", name))
		if err != nil {
			t.Fatal(err)
		}
		b := raw[:len(raw)-sha256.Size]
		sum := sha256.Sum256(b)
		return append(append([]byte(nil), b...), sum[:]...)
	}
	for _, tc := range []struct {
		name    string
		content []byte // nil: no file
		want    error
		says    string // in the error, when set
	}{
		{"a byte of the database flipped", flip(5000), ErrSnapshotHash, "its content hashes to"},
		{"a byte of the first page flipped", flip(0), ErrSnapshotHash, ""},
		{"a byte of the hash flipped", flip(len(good) - 1), ErrSnapshotHash, ""},
		{"a bare database, no hash", body, ErrSnapshotHash, "is not whole 512-byte database pages followed by the 32-byte SHA-256"},
		{"cut short", good[:len(good)-100], ErrSnapshotHash, "a cut copy"},
		{"empty", []byte{}, ErrSnapshotHash, "at 0 bytes it is shorter than the 32-byte SHA-256"},
		{"shorter than a hash", []byte("etcd"), ErrSnapshotHash, "at 4 bytes it is shorter"},
		{"re-hashed, bbolt panics on it", rehashed("p2-o8-vff.db"), ErrMalformedSnapshot, ""},
		{"missing", nil, fs.ErrNotExist, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "out", "db")
			if err := os.Mkdir(filepath.Dir(dst), 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.content != nil {
				if err := os.WriteFile(src, tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ImportSnapshot(t.Context(), src, dst)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ImportSnapshot = %v; want an error wrapping %v", err, tc.want)
			}
			if tc.says != "" && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("ImportSnapshot = %v; want it to say %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "room for") {
				t.Errorf("ImportSnapshot = %v: the check is of page alignment, not room", err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 0 {
				t.Errorf("a refused snapshot left %v", ents)
			}
			if tc.content != nil {
				if after, _ := os.ReadFile(src); !bytes.Equal(after, tc.content) {
					t.Error("the snapshot file changed")
				}
			}
		})
	}
}

func TestImportSnapshotKeepsExistingDestination(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(dst, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportSnapshot(t.Context(), goodSnapshot, dst); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("ImportSnapshot over an existing file = %v; want ErrExist", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "mine" {
		t.Errorf("existing destination changed to %d bytes", len(b))
	}
}

// TestWriteSnapshotRoundTrip: a database written by WriteSnapshot is byte
// for byte the snapshot etcd wrote, and imports again.
func TestWriteSnapshotRoundTrip(t *testing.T) {
	good := readGood(t)
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, good[:len(good)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, sum, err := WriteSnapshot(&buf, db)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(good)) || !bytes.Equal(buf.Bytes(), good) {
		t.Fatalf("WriteSnapshot wrote %d bytes, not the %d of the snapshot etcd wrote", n, len(good))
	}
	if want := sha256.Sum256(good[:len(good)-sha256.Size]); sum != hexString(want[:]) {
		t.Errorf("WriteSnapshot sum %s, want %x", sum, want)
	}
	odd := filepath.Join(t.TempDir(), "odd")
	if err := os.WriteFile(odd, good[:1000], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := WriteSnapshot(&bytes.Buffer{}, odd); err == nil {
		t.Error("WriteSnapshot of a database that is not whole pages succeeded")
	}
}

// TestCopyCheckingHashChunks: the hash check does not depend on how the
// reader splits the file.
func TestCopyCheckingHashChunks(t *testing.T) {
	good := readGood(t)
	for _, chunk := range []int{1, 7, 31, 32, 33, 512, 4096, len(good)} {
		var out bytes.Buffer
		if err := copyCheckingHash(&out, &chunkReader{b: good, n: chunk}, "good.db"); err != nil {
			t.Errorf("chunks of %d: %v", chunk, err)
		}
		if !bytes.Equal(out.Bytes(), good[:len(good)-sha256.Size]) {
			t.Errorf("chunks of %d: copied %d bytes, not the database", chunk, out.Len())
		}
	}
}

// FuzzSnapshotHash: copyCheckingHash accepts exactly a whole number of
// 512-byte blocks followed by their SHA-256, and copies those blocks and
// nothing else.
func FuzzSnapshotHash(f *testing.F) {
	good, err := os.ReadFile(goodSnapshot)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 4096)
	f.Add(good[:len(good)-sha256.Size], 512)
	sum := sha256.Sum256(nil)
	f.Add(sum[:], 1)
	block := make([]byte, 512)
	sum = sha256.Sum256(block)
	f.Add(append(block, sum[:]...), 33)
	f.Add([]byte("etcd"), 3)
	f.Fuzz(func(t *testing.T, in []byte, chunk int) {
		chunk = 1 + int(uint(chunk)%4096) // reads of 1 to 4096 bytes
		var out bytes.Buffer
		err := copyCheckingHash(&out, &chunkReader{b: in, n: chunk}, "in")
		valid := len(in) >= sha256.Size && (len(in)-sha256.Size)%512 == 0
		if valid {
			s := sha256.Sum256(in[:len(in)-sha256.Size])
			valid = bytes.Equal(s[:], in[len(in)-sha256.Size:])
		}
		if valid != (err == nil) {
			t.Fatalf("%d bytes: valid %v, copyCheckingHash error %v", len(in), valid, err)
		}
		if err != nil && !errors.Is(err, ErrSnapshotHash) {
			t.Fatalf("error %v does not wrap ErrSnapshotHash", err)
		}
		if err == nil && !bytes.Equal(out.Bytes(), in[:len(in)-sha256.Size]) {
			t.Fatalf("copied %d bytes, not the %d before the hash", out.Len(), len(in)-sha256.Size)
		}
	})
}

// chunkReader returns b at most n bytes at a time.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}

func hexString(b []byte) string { return hex.EncodeToString(b) }
