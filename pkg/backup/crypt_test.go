package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(t *testing.T) *Key {
	t.Helper()
	k, err := GenerateKeyFile(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func seal(t *testing.T, k *Key, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewEncryptWriter(&buf, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func open(k *Key, ct []byte) ([]byte, error) {
	r, err := NewDecryptReader(bytes.NewReader(ct), k)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestEncryptRoundTrip(t *testing.T) {
	k := testKey(t)
	for _, n := range []int{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 17} {
		plain := make([]byte, n)
		rand.Read(plain)
		got, err := open(k, seal(t, k, plain))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: round trip changed the data", n)
		}
	}
}

func TestDecryptRefusesTampering(t *testing.T) {
	k := testKey(t)
	plain := bytes.Repeat([]byte("etcd"), chunkSize) // 4 chunks
	ct := seal(t, k, plain)
	rec := 4 + chunkSize + 16 // one full record
	hdr := len(encMagic) + 12
	tests := map[string][]byte{
		"bit flip":         func() []byte { c := bytes.Clone(ct); c[hdr+100] ^= 1; return c }(),
		"truncated":        ct[:hdr+2*rec],
		"last record gone": ct[:len(ct)-(4+16)],
		"records swapped":  append(append(append(bytes.Clone(ct[:hdr]), ct[hdr+rec:hdr+2*rec]...), ct[hdr:hdr+rec]...), ct[hdr+2*rec:]...),
		"trailing garbage": append(bytes.Clone(ct), 1, 2, 3),
		"not encrypted":    []byte("plain text, not a Steward backup at all"),
	}
	for name, c := range tests {
		if _, err := open(k, c); err == nil {
			t.Errorf("%s: decrypted without error", name)
		}
	}
	if _, err := open(testKey(t), ct); !errors.Is(err, ErrWrongKey) {
		t.Errorf("wrong key: %v, want ErrWrongKey", err)
	}
}

func TestLoadKeyFormats(t *testing.T) {
	dir := t.TempDir()
	raw := make([]byte, 32)
	rand.Read(raw)
	var ids []string
	for name, content := range map[string][]byte{
		"raw": raw,
		"hex": []byte(hex.EncodeToString(raw) + "\n"),
		"b64": []byte(base64.StdEncoding.EncodeToString(raw) + "\n"),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := LoadKey(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ids = append(ids, k.ID())
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("the same key in three formats has different IDs: %v", ids)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("too short"), 0o600)
	if _, err := LoadKey(bad); err == nil || !strings.Contains(err.Error(), "want 32 raw bytes") {
		t.Errorf("bad key: %v", err)
	}
}

func TestLocalStore(t *testing.T) {
	ctx := context.Background()
	s, err := NewLocalStore(filepath.Join(t.TempDir(), "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "full/a.json", strings.NewReader("{}")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "full/a.json", strings.NewReader("{}")); err == nil {
		t.Error("Put replaced an existing object")
	}
	if err := s.Put(ctx, "../escape", strings.NewReader("x")); err == nil {
		t.Error("Put accepted a name outside the store")
	}
	names, err := s.List(ctx, "full/")
	if err != nil || len(names) != 1 || names[0] != "full/a.json" {
		t.Fatalf("List: %v %v", names, err)
	}
	fi, _ := os.Stat(filepath.Join(s.Dir, "full", "a.json"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("object mode %o", fi.Mode().Perm())
	}
	if _, err := s.Get(ctx, "full/missing"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Get missing: %v", err)
	}
	// A failed upload leaves nothing behind.
	if err := s.Put(ctx, "full/b", io.MultiReader(strings.NewReader("x"), errReader{})); err == nil {
		t.Error("Put of a failing reader succeeded")
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir, "full"))
	if len(ents) != 1 {
		t.Errorf("failed upload left files: %v", ents)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestHoldBackHash(t *testing.T) {
	data := make([]byte, 100000)
	rand.Read(data)
	want := sha256.Sum256(data[:len(data)-32])
	for _, chunk := range []int{1, 7, 31, 32, 33, 4096, 100000} {
		h := &holdBackHash{h: sha256.New()}
		for i := 0; i < len(data); i += chunk {
			h.Write(data[i:min(i+chunk, len(data))])
		}
		if !bytes.Equal(h.h.Sum(nil), want[:]) || !bytes.Equal(h.tail, data[len(data)-32:]) {
			t.Errorf("chunk %d: wrong hash or tail", chunk)
		}
	}
}

// TestEncryptedNeedsKey: reading an encrypted backup without a key is
// refused with ErrNeedKey, a message that names the backup and its key id
// (and no flag: the command adds that), before the store is read.
func TestEncryptedNeedsKey(t *testing.T) {
	s, err := NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	full := Manifest{ID: "20260101T000000.000Z-full-r10", Kind: KindFull, Encryption: "aes-256-gcm", KeyID: "k1"}
	delta := Manifest{ID: "20260101T000001.000Z-delta-r11", Kind: KindDelta, Encryption: "aes-256-gcm", KeyID: "k1"}
	for name, err := range map[string]error{
		"fetch":        Fetch(ctx, s, full, nil, filepath.Join(t.TempDir(), "db")),
		"verify delta": VerifyDelta(ctx, s, delta, nil, ""),
	} {
		if !errors.Is(err, ErrNeedKey) {
			t.Errorf("%s: %v, want ErrNeedKey", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "is encrypted (key id k1)") || strings.Contains(msg, "--") {
			t.Errorf("%s: %q", name, msg)
		}
	}
}
