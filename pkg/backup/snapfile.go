package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrSnapshotHash: a snapshot file does not end with the SHA-256 of its
// content, as a file `etcdctl snapshot save` wrote does (and as `etcdutl
// snapshot restore` checks): it is corrupt, was altered, or is not such a
// file (a member's bare database, for one).
var ErrSnapshotHash = errors.New("snapshot file fails its hash")

// snapshotPage is the unit etcd checks a snapshot's size against: a
// database is a whole number of pages, so a file holds an appended hash
// when its size is 32 bytes past a multiple of 512 (etcdutl's hasChecksum).
const snapshotPage = 512

// ImportSnapshot reads the snapshot file src as `etcdctl snapshot save`
// writes it (an etcd database followed by its SHA-256) once, writing the
// database without the hash to dst (created 0600; it must not exist), and
// checks it: the hash, as etcdutl's restore does (ErrSnapshotHash), then
// the database itself, with bbolt's consistency check in a child process
// (checkToWrite, which leaves dst's freelist written for the opens that
// write to it next; ErrMalformedSnapshot when bbolt crashes on it). src is
// never changed. On any failure dst is removed, so a refused file leaves
// nothing.
func ImportSnapshot(ctx context.Context, src, dst string) (info SnapshotInfo, err error) {
	in, err := os.Open(src)
	if err != nil {
		return info, fmt.Errorf("read snapshot file: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return info, fmt.Errorf("read snapshot file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return info, fmt.Errorf("snapshot file %s is not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return info, fmt.Errorf("copy snapshot file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(dst)
		}
	}()
	if err := copyCheckingHash(out, in, src); err != nil {
		return info, err
	}
	if err := out.Sync(); err != nil {
		return info, fmt.Errorf("copy snapshot file: %w", err)
	}
	if err := out.Close(); err != nil {
		return info, fmt.Errorf("copy snapshot file: %w", err)
	}
	if info, err = checkToWrite(ctx, dst); err != nil {
		return info, fmt.Errorf("snapshot file %s: %w", src, err)
	}
	return info, nil
}

// copyCheckingHash copies r to w, all but its last 32 bytes, and checks
// that those are the SHA-256 of what was copied. name is r's, for errors.
func copyCheckingHash(w io.Writer, r io.Reader, name string) error {
	h := sha256.New()
	hb := &holdBack{w: io.MultiWriter(w, h)}
	n, err := io.Copy(hb, r)
	if err != nil {
		return fmt.Errorf("copy snapshot file %s: %w", name, err)
	}
	if hb.err != nil {
		return fmt.Errorf("copy snapshot file %s: %w", name, hb.err)
	}
	if n < sha256.Size {
		return fmt.Errorf("%s: %w: at %d bytes it is shorter than the %d-byte SHA-256 `etcdctl snapshot save` appends (not a snapshot file)",
			name, ErrSnapshotHash, n, sha256.Size)
	}
	if (n-sha256.Size)%snapshotPage != 0 {
		// etcdutl's hasChecksum: a database is whole pages, so a file with
		// the hash appended is 32 bytes past a multiple of 512.
		return fmt.Errorf("%s: %w: its size (%d bytes) is not whole %d-byte database pages followed by the %d-byte SHA-256 `etcdctl snapshot save` appends (a bare database without the hash, a cut copy, or not a snapshot file)",
			name, ErrSnapshotHash, n, snapshotPage, sha256.Size)
	}
	if got := h.Sum(nil); !bytes.Equal(got, hb.tail) {
		return fmt.Errorf("%s: %w: its content hashes to %s, but it ends with %s (the file is corrupt or was altered)",
			name, ErrSnapshotHash, hex.EncodeToString(got), hex.EncodeToString(hb.tail))
	}
	return nil
}

// holdBack passes everything written to it on to w except the last 32
// bytes, which it keeps in tail.
type holdBack struct {
	w    io.Writer
	tail []byte
	err  error // the first error of w; later writes are dropped
}

func (b *holdBack) Write(p []byte) (int, error) {
	buf := append(b.tail, p...)
	if len(buf) > sha256.Size {
		if b.err == nil {
			_, b.err = b.w.Write(buf[:len(buf)-sha256.Size])
		}
		buf = append([]byte(nil), buf[len(buf)-sha256.Size:]...)
	}
	b.tail = buf
	if b.err != nil {
		return 0, b.err
	}
	return len(p), nil
}

// WriteSnapshot writes the etcd database at db to w followed by its
// SHA-256: the form `etcdctl snapshot save` writes and `etcdutl snapshot
// restore` checks. It returns the bytes written and the database's SHA-256
// (hex).
func WriteSnapshot(w io.Writer, db string) (int64, string, error) {
	f, err := os.Open(db)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), f)
	if err != nil {
		return n, "", fmt.Errorf("write snapshot of %s: %w", db, err)
	}
	if n%snapshotPage != 0 {
		// etcdutl would take the file for one without a hash.
		return n, "", fmt.Errorf("write snapshot of %s: the database is %d bytes, not a whole number of pages", db, n)
	}
	sum := h.Sum(nil)
	if _, err := w.Write(sum); err != nil {
		return n, "", fmt.Errorf("write snapshot of %s: %w", db, err)
	}
	return n + sha256.Size, hex.EncodeToString(sum), nil
}
