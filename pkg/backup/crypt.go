package backup

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Encryption format (AES-256-GCM in sealed chunks, so a backup of any size
// streams in constant memory and a truncated or reordered object is caught):
//
//	magic "STWAES1\n" | 12-byte base nonce | records...
//	record: 4-byte big-endian plaintext length | ciphertext+tag
//
// Record i is sealed with nonce = base nonce XOR i (in its last 8 bytes) and
// additional data = i (8 bytes) | final flag (1 byte). The last record has
// the final flag set; a stream that ends without it is truncated.
const (
	encMagic  = "STWAES1\n"
	chunkSize = 64 << 10
)

// Key is a 256-bit encryption key.
type Key struct {
	b [32]byte
}

// ID names a key without revealing it: the first 16 hex digits of its
// SHA-256. Manifests record it so a wrong key is named, not guessed.
func (k *Key) ID() string {
	s := sha256.Sum256(k.b[:])
	return hex.EncodeToString(s[:8])
}

// LoadKey reads a key file: 32 raw bytes, or 64 hex digits, or base64 of 32
// bytes (surrounding white space ignored). The key is never logged.
func LoadKey(path string) (*Key, error) {
	if err := CheckKeyFileMode(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read encryption key: %w", err)
	}
	var k Key
	switch t := strings.TrimSpace(string(b)); {
	case len(b) == 32:
		copy(k.b[:], b)
	case len(t) == 64:
		d, err := hex.DecodeString(t)
		if err != nil {
			return nil, fmt.Errorf("encryption key %s: 64 characters but not hex", path)
		}
		copy(k.b[:], d)
	default:
		d, err := base64.StdEncoding.DecodeString(t)
		if err != nil || len(d) != 32 {
			return nil, fmt.Errorf("encryption key %s: want 32 raw bytes, 64 hex digits or base64 of 32 bytes", path)
		}
		copy(k.b[:], d)
	}
	return &k, nil
}

// ErrKeyFileMode: a key file other users may read or write.
var ErrKeyFileMode = errors.New("key file is not private")

// CheckKeyFileMode refuses a key file with any group or other permission
// bit: whoever can read it can read every backup, and whoever can write it
// chooses the key new backups are encrypted with.
func CheckKeyFileMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read encryption key: %w", err)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("encryption key %s has mode %04o: %w: other users may read or change it; make it 0600 (chmod 600 %s)", path, m, ErrKeyFileMode, path)
	}
	return nil
}

// GenerateKeyFile writes a new random key (hex) to path with mode 0600.
func GenerateKeyFile(path string) (*Key, error) {
	var k Key
	if _, err := rand.Read(k.b[:]); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create key file: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, hex.EncodeToString(k.b[:])); err != nil {
		return nil, err
	}
	return &k, f.Sync()
}

func (k *Key) aead() cipher.AEAD {
	blk, err := aes.NewCipher(k.b[:])
	if err != nil {
		panic(err) // 32-byte key: cannot fail
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		panic(err)
	}
	return g
}

func chunkNonce(base []byte, i uint64) []byte {
	n := make([]byte, len(base))
	copy(n, base)
	var c [8]byte
	binary.BigEndian.PutUint64(c[:], i)
	for j := 0; j < 8; j++ {
		n[len(n)-8+j] ^= c[j]
	}
	return n
}

func chunkAD(i uint64, final bool) []byte {
	ad := make([]byte, 9)
	binary.BigEndian.PutUint64(ad, i)
	if final {
		ad[8] = 1
	}
	return ad
}

// encryptWriter seals what is written to it into w.
type encryptWriter struct {
	w     io.Writer
	aead  cipher.AEAD
	base  []byte
	i     uint64
	buf   []byte
	wrote bool
}

// NewEncryptWriter returns a writer that encrypts into w; Close writes the
// final record (it does not close w).
func NewEncryptWriter(w io.Writer, k *Key) (io.WriteCloser, error) {
	e := &encryptWriter{w: w, aead: k.aead(), base: make([]byte, 12), buf: make([]byte, 0, chunkSize)}
	if _, err := rand.Read(e.base); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *encryptWriter) header() error {
	if e.wrote {
		return nil
	}
	e.wrote = true
	if _, err := io.WriteString(e.w, encMagic); err != nil {
		return err
	}
	_, err := e.w.Write(e.base)
	return err
}

func (e *encryptWriter) seal(p []byte, final bool) error {
	if err := e.header(); err != nil {
		return err
	}
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(p)))
	if _, err := e.w.Write(l[:]); err != nil {
		return err
	}
	ct := e.aead.Seal(nil, chunkNonce(e.base, e.i), p, chunkAD(e.i, final))
	e.i++
	_, err := e.w.Write(ct)
	return err
}

func (e *encryptWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := copy(e.buf[len(e.buf):cap(e.buf)], p)
		e.buf = e.buf[:len(e.buf)+k]
		p = p[k:]
		n += k
		if len(e.buf) == cap(e.buf) && len(p) > 0 {
			if err := e.seal(e.buf, false); err != nil {
				return n, err
			}
			e.buf = e.buf[:0]
		}
	}
	return n, nil
}

func (e *encryptWriter) Close() error {
	return e.seal(e.buf, true)
}

// ErrWrongKey means the object does not decrypt with the given key.
var ErrWrongKey = errors.New("decryption failed: wrong key or corrupted backup")

// decryptReader opens records as they are read.
type decryptReader struct {
	r    *bufio.Reader
	aead cipher.AEAD
	base []byte
	i    uint64
	buf  []byte
	done bool
}

// NewDecryptReader returns a reader of the plaintext of an encrypted stream.
// It fails on a wrong key, a modified record, and a truncated stream.
func NewDecryptReader(r io.Reader, k *Key) (io.Reader, error) {
	br := bufio.NewReaderSize(r, chunkSize+64)
	hdr := make([]byte, len(encMagic)+12)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, fmt.Errorf("encrypted backup header: %w", err)
	}
	if string(hdr[:len(encMagic)]) != encMagic {
		return nil, errors.New("not an encrypted Steward backup (bad header)")
	}
	return &decryptReader{r: br, aead: k.aead(), base: hdr[len(encMagic):]}, nil
}

func (d *decryptReader) Read(p []byte) (int, error) {
	for len(d.buf) == 0 {
		if d.done {
			return 0, io.EOF
		}
		var l [4]byte
		if _, err := io.ReadFull(d.r, l[:]); err != nil {
			return 0, fmt.Errorf("encrypted backup is truncated (record %d): %w", d.i, io.ErrUnexpectedEOF)
		}
		n := binary.BigEndian.Uint32(l[:])
		if n > chunkSize {
			return 0, fmt.Errorf("encrypted backup record %d is corrupt (length %d)", d.i, n)
		}
		ct := make([]byte, int(n)+d.aead.Overhead())
		if _, err := io.ReadFull(d.r, ct); err != nil {
			return 0, fmt.Errorf("encrypted backup is truncated (record %d): %w", d.i, io.ErrUnexpectedEOF)
		}
		nonce := chunkNonce(d.base, d.i)
		pt, err := d.aead.Open(nil, nonce, ct, chunkAD(d.i, false))
		if err != nil {
			pt, err = d.aead.Open(nil, nonce, ct, chunkAD(d.i, true))
			if err != nil {
				return 0, fmt.Errorf("record %d: %w", d.i, ErrWrongKey)
			}
			d.done = true
			if _, err := d.r.Peek(1); err == nil {
				return 0, errors.New("encrypted backup has data after its final record")
			}
		}
		d.i++
		d.buf = pt
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}
