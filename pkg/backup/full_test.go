package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// snapshotStream is a stream as etcd sends it: a database whose length is
// a multiple of 512 bytes, then its SHA-256.
func snapshotStream(t *testing.T, n int) []byte {
	t.Helper()
	db := make([]byte, n)
	if _, err := rand.Read(db); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// stallReader returns its data, then blocks until ctx ends (as the gRPC
// snapshot stream does when the member stops sending) or fails with err.
type stallReader struct {
	ctx  context.Context
	r    io.Reader
	err  error         // returned after the data instead of blocking, when set
	read chan struct{} // closed once the data was read
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != io.EOF {
		return n, err
	}
	select {
	case <-s.read:
	default:
		close(s.read)
	}
	if s.err != nil {
		return 0, s.err
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

func TestWriteSnapshot(t *testing.T) {
	good := snapshotStream(t, 3*pipeChunkSize+512*7) // several chunks and a partial one
	bad := append([]byte(nil), good...)
	bad[12345] ^= 1
	for _, tc := range []struct {
		name      string
		stream    []byte
		level     zstd.EncoderLevel
		key       bool
		writeBack bool
		wantErr   string
	}{
		{name: "fastest", stream: good, level: zstd.SpeedFastest},
		{name: "fastest, written back as it goes", stream: good, level: zstd.SpeedFastest, writeBack: true},
		{name: "none", stream: good, level: levelNone},
		{name: "none, encrypted", stream: good, level: levelNone, key: true},
		{name: "none, kept by a local store (O_DIRECT)", stream: good, level: levelNone, writeBack: true},
		{name: "default, encrypted", stream: good, level: zstd.SpeedDefault, key: true},
		{name: "better", stream: good, level: zstd.SpeedBetterCompression},
		{name: "one byte flipped", stream: bad, level: zstd.SpeedFastest, wantErr: "checksum mismatch"},
		{name: "cut short", stream: good[:len(good)-100], level: zstd.SpeedFastest, wantErr: "carries no etcd checksum"},
		{name: "empty", stream: nil, level: zstd.SpeedFastest, wantErr: "carries no etcd checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var key *Key
			if tc.key {
				key = testKey(t)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			packedPath := filepath.Join(dir, "packed")
			var db bytes.Buffer
			rawSize, size, sum, err := writeSnapshot(ctx, cancel, bytes.NewReader(tc.stream), &db, packedFile{packedPath, tc.writeBack}, key, tc.level)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rawSize != int64(len(tc.stream)) {
				t.Errorf("raw size %d, want %d", rawSize, len(tc.stream))
			}
			if !bytes.Equal(db.Bytes(), tc.stream[:len(tc.stream)-32]) {
				t.Error("the database written differs from the stream without its checksum")
			}
			if fi, err := os.Stat(packedPath); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, err %v; want 0600", packedPath, fi.Mode().Perm(), err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("the pipeline wrote %d files, want the packed object alone", len(ents))
			}
			obj, err := os.ReadFile(packedPath)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(obj)) != size || hexSHA256(obj) != sum {
				t.Errorf("packed object: %d bytes, reported %d; SHA-256 reported %s", len(obj), size, sum)
			}
			if tc.level == levelNone && key == nil && !bytes.Equal(obj, tc.stream) {
				t.Error("stored without compression, the object is not the stream")
			}
			zr, err := plaintext(bytes.NewReader(obj), compressionOf(tc.level), key)
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			plain, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain, tc.stream) {
				t.Error("packed object does not decompress to the stream")
			}
		})
	}
}

// TestWriteSnapshotStopsEveryStage: when ctx ends or the stream fails in
// the middle of a snapshot, writeSnapshot returns the error and no goroutine
// of its pipeline remains.
func TestWriteSnapshotStopsEveryStage(t *testing.T) {
	stream := snapshotStream(t, 40*pipeChunkSize) // more than the pipeline holds
	for _, tc := range []struct {
		name    string
		fail    error // the stream's error; nil: ctx is cancelled instead
		wantErr error
	}{
		{name: "context cancelled mid-stream", wantErr: context.Canceled},
		{name: "stream fails mid-stream", fail: errors.New("connection reset"), wantErr: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			dir := t.TempDir()
			outer, stop := context.WithCancel(t.Context())
			defer stop()
			ctx, cancel := context.WithCancel(outer)
			defer cancel()
			sr := &stallReader{ctx: ctx, r: bytes.NewReader(stream[:25*pipeChunkSize]), err: tc.fail, read: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				_, _, _, err := writeSnapshot(ctx, cancel, sr, io.Discard, packedFile{path: filepath.Join(dir, "packed")}, nil, zstd.SpeedDefault)
				done <- err
			}()
			if tc.fail == nil {
				<-sr.read // the stream is now stalled mid-snapshot
				stop()
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("writeSnapshot did not return")
			}
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			case tc.fail != nil && !errors.Is(err, tc.fail):
				t.Fatalf("err = %v, want %v", err, tc.fail)
			}
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > before {
				if time.Now().After(deadline) {
					buf := make([]byte, 1<<20)
					t.Fatalf("%d goroutines remain, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func hexSHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// BenchmarkWriteSnapshot measures the pipeline alone (no member, no
// network) on 64 MB of random base64 values at each compression level,
// against copying the stream to a file (what etcdctl snapshot save does).
func BenchmarkWriteSnapshot(b *testing.B) {
	rnd := make([]byte, 48<<20)
	if _, err := rand.Read(rnd); err != nil {
		b.Fatal(err)
	}
	db := []byte(base64.StdEncoding.EncodeToString(rnd))
	db = db[:len(db)/512*512]
	sum := sha256.Sum256(db)
	stream := append(db, sum[:]...)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		for i := 0; i < b.N; i++ {
			f, err := os.Create(filepath.Join(b.TempDir(), "db"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(f, bytes.NewReader(stream)); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	for _, level := range []string{CompressionNone, CompressionFastest, CompressionDefault, CompressionBetter} {
		b.Run(level, func(b *testing.B) {
			zl, _ := CompressionLevel(level)
			b.SetBytes(int64(len(stream)))
			var size int64
			for i := 0; i < b.N; i++ {
				dir := b.TempDir()
				ctx, cancel := context.WithCancel(b.Context())
				var err error
				_, size, _, err = writeSnapshot(ctx, cancel, bytes.NewReader(stream), datadir.NewRevisionScanner(), packedFile{path: filepath.Join(dir, "packed")}, nil, zl)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)/float64(len(stream)), "stored/raw")
		})
	}
}

// TestSnapshotRevisionsFallback: a database whose last revision's value
// spans more pages than the stream scanner keeps (17 MiB): the scan
// fails, and the revisions are read from the packed object unpacked
// (encrypted here), the same as datadir.Revisions reads from the file;
// the unpacked copy is removed.
func TestSnapshotRevisionsFallback(t *testing.T) {
	p := filepath.Join(t.TempDir(), "db")
	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		v := make([]byte, 8)
		binary.BigEndian.PutUint64(v, 3)
		if err := mb.Put([]byte("finishedCompactRev"), v); err != nil {
			return err
		}
		for r := 1; r <= 10; r++ {
			k := make([]byte, 17)
			binary.BigEndian.PutUint64(k, uint64(r))
			k[8] = '_'
			size := 100
			if r == 10 {
				size = 17 << 20
			}
			if err := kb.Put(k, make([]byte, size)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	if err := db.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(&stream); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wantRev, wantCompacted, err := datadir.Revisions(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(stream.Bytes())
	stream.Write(sum[:])

	for _, level := range []string{CompressionFastest, CompressionNone} {
		t.Run(level, func(t *testing.T) {
			zl, err := CompressionLevel(level)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			key := testKey(t)
			packed := filepath.Join(dir, "snapshot.pack")
			scan := datadir.NewRevisionScanner()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if _, _, _, err := writeSnapshot(ctx, cancel, bytes.NewReader(stream.Bytes()), scan, packedFile{path: packed}, key, zl); err != nil {
				t.Fatal(err)
			}
			st, err := snapshotRevisions(t.Context(), scan, packed, compressionOf(zl), key, dir)
			if err != nil || st.Revision != wantRev || st.CompactRevision != wantCompacted {
				t.Fatalf("snapshotRevisions = %+v, %v; want revision %d, compacted %d", st, err, wantRev, wantCompacted)
			}
			if _, _, err := scan.Result(); err == nil || !strings.Contains(err.Error(), "spans more than") {
				t.Errorf("the scan itself: %v; want it to fail on the 17 MiB page", err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("%d files left in the scratch directory, want the packed object alone", len(ents))
			}
		})
	}
}
