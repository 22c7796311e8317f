package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/pagecache"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/datadir"
)

// FullOptions configure TakeFull.
type FullOptions struct {
	// Member is the name of the member streamed from (cli must be
	// connected to it alone).
	Member string
	// ClusterID and EtcdVersion are recorded in the manifest.
	ClusterID, EtcdVersion string
	// Lineage is the cluster's current timeline, recorded in the manifest.
	Lineage Lineage
	// Key, when set, encrypts the backup.
	Key *Key
	// Auth is the cluster backup key that authenticates the manifest
	// (required).
	Auth *AuthKey
	// TempDir holds the snapshot while it is checked (default os.TempDir()).
	TempDir string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Compression is the zstd level: CompressionFastest (default),
	// CompressionDefault or CompressionBetter; or CompressionNone.
	Compression string
}

// TakeFull streams a snapshot from one member, checks the SHA-256 etcd
// appends to it, reads the revision it actually contains from the snapshot
// itself, compresses (zstd) and optionally encrypts it, and stores it with
// its manifest. Nothing is stored unless every check passed; the manifest is
// stored last.
func TakeFull(ctx context.Context, cli *clientv3.Client, s Store, o FullOptions) (Manifest, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	level, err := CompressionLevel(o.Compression)
	if err != nil {
		return Manifest{}, err
	}
	sd, err := scratch.New(o.TempDir, "steward-snapshot-")
	if err != nil {
		return Manifest{}, err
	}
	defer sd.Remove()
	tmp := sd.Path
	// One pass over the stream: its hash (etcd's appended checksum), the
	// revisions read from the database as it streams by (a scan of its
	// pages: the raw database is never written, so a backup writes the
	// snapshot once), and the packed object (to store once every check
	// passed).
	packed := filepath.Join(tmp, "snapshot.pack")
	scan := datadir.NewRevisionScanner()
	// A local store keeps the packed file itself (PutFile syncs and links
	// it): its write-back to disk runs while the snapshot streams, so that
	// sync finds it written.
	_, writeBack := s.(FilePutter)
	rawSize, size, sum, err := streamSnapshot(ctx, cli, scan, packedFile{packed, writeBack}, o.Key, level)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot from %s: %w", o.Member, err)
	}
	// The revision comes from the snapshot itself (what InspectRevision
	// reads from a file). The full consistency check (every page, every
	// key) runs at verify and restore, not here: etcd's checksum and the
	// stored object's SHA-256 protect the bytes, and skipping it doubles
	// backup throughput.
	st, err := snapshotRevisions(ctx, scan, packed, compressionOf(level), o.Key, tmp)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot from %s: %w", o.Member, err)
	}
	m := Manifest{
		ID: NewID(KindFull, o.Now(), st.Revision), Kind: KindFull, ClusterID: o.ClusterID,
		Member: o.Member, StartRevision: st.CompactRevision, EndRevision: st.Revision,
		EtcdVersion: o.EtcdVersion, RawSize: rawSize, SnapshotHash: st.Hash, TotalKeys: st.TotalKey,
		Compression: compressionOf(level), CreatedAt: o.Now().UTC(), Size: size, SHA256: sum,
		Lineage: o.Lineage,
	}
	if m.StartRevision < 1 {
		m.StartRevision = 1
	}
	if o.Key != nil {
		m.Encryption, m.KeyID = encAlgorithm, o.Key.ID()
	}
	f, err := os.Open(packed)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	if err := putWithManifest(ctx, s, o.Auth, &m, f); err != nil {
		return Manifest{}, err
	}
	// Read back what was written, once per full backup: a store that
	// acknowledged a write it did not keep is found now, not at restore.
	if err := ReadBackFile(ctx, s, o.Auth, m, packed); err != nil {
		return m, err
	}
	return m, nil
}

// snapshotRevisions returns the revisions scan read from the database as it
// streamed. When the scan could not read them (a page larger than it
// keeps), the database is read from a file instead: the packed object at
// packed (compression and key: how it was packed) unpacked into tmp, then
// removed.
func snapshotRevisions(ctx context.Context, scan *datadir.RevisionScanner, packed, compression string, key *Key, tmp string) (SnapshotInfo, error) {
	rev, compacted, scanErr := scan.Result()
	if scanErr == nil {
		return SnapshotInfo{Revision: rev, CompactRevision: compacted}, nil
	}
	raw := filepath.Join(tmp, "snapshot.db")
	defer os.Remove(raw)
	if err := unpack(ctx, packed, compression, key, raw); err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot database: %v; unpacking it to read it from a file: %w", scanErr, err)
	}
	return InspectRevision(raw)
}

// unpack decrypts (key: when set) and decompresses (compression: a
// manifest's) the packed object at src into a new file dst (0600).
func unpack(ctx context.Context, src, compression string, key *Key, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := plaintext(f, compression, key)
	if err != nil {
		return err
	}
	defer zr.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, ctxReader{ctx, zr}); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// plaintext reads a packed object from r: decrypted with key when set,
// then decompressed as compression (a manifest's: "zstd", with one decoder
// goroutine and a window of 1 GiB at most; or "none"). Close it after
// reading.
func plaintext(r io.Reader, compression string, key *Key) (io.ReadCloser, error) {
	if key != nil {
		var err error
		if r, err = NewDecryptReader(r, key); err != nil {
			return nil, err
		}
	}
	switch compression {
	case compressionZstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	case CompressionNone:
		return io.NopCloser(r), nil
	}
	return nil, fmt.Errorf("compression %q: %w", compression, ErrCompression)
}

// Compression levels a full snapshot can be stored with (spec
// backup.compression). They trade stored size for the CPU spent while the
// snapshot streams; see docs/benchmarks.md for the measured sizes.
const (
	// CompressionFastest is zstd's fastest level: the default, because it
	// keeps a backup at the speed of etcdctl snapshot save.
	CompressionFastest = "fastest"
	// CompressionDefault is zstd's default level: smaller objects, slower.
	CompressionDefault = "default"
	// CompressionBetter is zstd's "better" level: smaller still, slower still.
	CompressionBetter = "better"
	// CompressionNone stores the database as it is (encrypted when a key is
	// set): no CPU for compression while the snapshot streams, an object
	// the size of the database. Its manifests say compression "none".
	CompressionNone = "none"
)

// compressionZstd is the manifest's compression of an object compressed
// with zstd, at any level.
const compressionZstd = "zstd"

// levelNone is the level CompressionLevel returns for CompressionNone:
// not one of zstd's (they start at 1); packStream then writes no zstd
// frame.
const levelNone zstd.EncoderLevel = 0

// ErrCompression: a compression level that is not one of CompressionFastest,
// CompressionDefault, CompressionBetter or CompressionNone.
var ErrCompression = errors.New("unknown compression level")

// CompressionLevel returns the zstd level named by a backup.compression
// value ("" is CompressionFastest; CompressionNone is levelNone).
func CompressionLevel(name string) (zstd.EncoderLevel, error) {
	switch name {
	case "", CompressionFastest:
		return zstd.SpeedFastest, nil
	case CompressionDefault:
		return zstd.SpeedDefault, nil
	case CompressionBetter:
		return zstd.SpeedBetterCompression, nil
	case CompressionNone:
		return levelNone, nil
	}
	return 0, fmt.Errorf("%q: %w (use fastest, default, better or none)", name, ErrCompression)
}

// compressionOf is the manifest's compression of an object packed at
// level: "none" for levelNone, else "zstd".
func compressionOf(level zstd.EncoderLevel) string {
	if level == levelNone {
		return CompressionNone
	}
	return compressionZstd
}

// Pipeline of streamSnapshot: chunks of pipeChunkSize bytes, at most
// pipelineChunks of them in flight (a memory cap of 16 MiB per snapshot).
const (
	pipeChunkSize  = 1 << 20
	pipelineChunks = 16
)

// chunk is one piece of the snapshot stream handed from stage to stage.
type chunk struct {
	buf []byte // a pooled buffer of pipeChunkSize bytes
	n   int    // bytes of buf that hold data
}

// streamSnapshot writes the member's snapshot database (without etcd's
// checksum) to db and, in the same pass, its packed form (zstd at level,
// or as it is; optionally encrypted) to the file packed names, and checks
// the SHA-256 that etcd appends to the stream (its last 32 bytes). cli
// must be connected to exactly the member to back up.
//
// Three stages run concurrently so that none waits for another: receive
// (fills pooled 1 MiB buffers from the gRPC stream), raw (hashes the
// stream and writes the database to db) and pack (compresses, encrypts,
// writes and hashes the packed file, on its way to disk as it goes when
// packed.writeBack). Bounded channels hand the buffers
// on; the pool caps memory at pipelineChunks buffers. The first error of
// any stage, or ctx ending, cancels the others; every stage has returned
// before streamSnapshot does.
func streamSnapshot(ctx context.Context, cli *clientv3.Client, db io.Writer, packed packedFile, key *Key, level zstd.EncoderLevel) (rawSize, size int64, sum string, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, 0, "", err
	}
	defer rc.Close()
	return writeSnapshot(ctx, cancel, rc, db, packed, key, level)
}

// writeSnapshot runs streamSnapshot's pipeline over rc, which must return
// from Read once ctx ends (as a gRPC stream opened with ctx does); cancel
// cancels ctx.
func writeSnapshot(ctx context.Context, cancel context.CancelFunc, rc io.Reader, db io.Writer, pf packedFile, key *Key, level zstd.EncoderLevel) (rawSize, size int64, sum string, err error) {
	f, err := os.OpenFile(pf.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, 0, "", err
	}
	defer f.Close()
	// Stored as it is and not encrypted, the object is the stream itself:
	// its SHA-256 is the raw stage's hash continued over etcd's checksum
	// (below), so the pack stage only writes, whole 1 MiB buffers, which
	// a file a local store keeps takes without the page cache (O_DIRECT:
	// the kernel's copy into the page cache was a third of the CPU).
	asIs := level == levelNone && key == nil
	var packed io.Writer = f
	switch {
	case pf.writeBack && asIs:
		packed = pagecache.NewDirectWriter(f)
	case pf.writeBack:
		packed = pagecache.NewWriter(f)
	}
	p := newPipeline(ctx, cancel)
	h := &holdBackHash{h: sha256.New(), also: db}
	var packN int64
	var packSum string
	p.run(func() error { return p.receive(rc) })
	p.run(func() error {
		// The raw stage owns db, h and rawSize until the pipeline ends.
		for {
			var c chunk
			var ok bool
			select {
			case c, ok = <-p.toRaw:
			case <-p.ctx.Done():
				return p.ctx.Err()
			}
			if !ok {
				break
			}
			h.Write(c.buf[:c.n])
			rawSize += int64(c.n)
			if err := p.send(p.toPack, c); err != nil {
				return err
			}
		}
		close(p.toPack)
		return nil
	})
	p.run(func() error {
		// The pack stage owns packed, packN and packSum until the pipeline
		// ends.
		var err error
		if asIs {
			packN, err = io.Copy(packed, &pipeReader{p: p})
			return err
		}
		packN, packSum, err = packStream(packed, &pipeReader{p: p}, key, level)
		return err
	})
	if err := p.wait(); err != nil {
		return rawSize, 0, "", fmt.Errorf("receive snapshot: %w", err)
	}
	// The temporary file is read back by this process only (page cache)
	// and the store syncs its own copy: no fsync here.
	if rawSize < sha256.Size || (rawSize-sha256.Size)%512 != 0 {
		return rawSize, 0, "", fmt.Errorf("snapshot of %d bytes carries no etcd checksum: the stream was cut short", rawSize)
	}
	if !bytes.Equal(h.h.Sum(nil), h.tail) {
		return rawSize, 0, "", errors.New("snapshot checksum mismatch: the data etcd sent does not match the SHA-256 it appended")
	}
	if asIs {
		if packN != rawSize {
			return rawSize, 0, "", fmt.Errorf("packed object of %d bytes, the stream had %d", packN, rawSize)
		}
		h.h.Write(h.tail) // Sum left h's state as it was
		packSum = hex.EncodeToString(h.h.Sum(nil))
	}
	return rawSize, packN, packSum, nil
}

// packedFile is where streamSnapshot writes the packed object: a new file
// at path. writeBack is for a file that will be synced (a local store
// keeps it): its write-back to disk is started as it is written
// (pagecache.Writer), or, for an object stored as it is and unencrypted,
// it is written with O_DIRECT (pagecache.DirectWriter).
type packedFile struct {
	path      string
	writeBack bool
}

// pipeline is the hand-off between streamSnapshot's stages.
type pipeline struct {
	ctx    context.Context
	cancel context.CancelFunc
	free   chan []byte // buffers not in use; pipelineChunks at most exist
	toRaw  chan chunk  // receive -> raw; closed by receive
	toPack chan chunk  // raw -> pack; closed by the raw stage
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // first error of a stage; guarded by mu
}

func newPipeline(ctx context.Context, cancel context.CancelFunc) *pipeline {
	p := &pipeline{
		ctx: ctx, cancel: cancel,
		free:   make(chan []byte, pipelineChunks),
		toRaw:  make(chan chunk, pipelineChunks),
		toPack: make(chan chunk, pipelineChunks),
	}
	for i := 0; i < pipelineChunks; i++ {
		p.free <- make([]byte, pipeChunkSize)
	}
	return p
}

// run starts a stage; its error, the first one, cancels the others.
func (p *pipeline) run(stage func() error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := stage(); err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
			p.cancel()
		}
	}()
}

// wait returns once every stage has returned, with the first error (or
// the context's, when it ended before the stream did).
func (p *pipeline) wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	return p.ctx.Err()
}

// send hands c to the next stage unless the pipeline was cancelled.
func (p *pipeline) send(to chan<- chunk, c chunk) error {
	select {
	case to <- c:
		return nil
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// receive fills free buffers from r and hands them to the raw stage.
func (p *pipeline) receive(r io.Reader) error {
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := p.send(p.toRaw, chunk{buf, n}); err != nil {
				return err
			}
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			close(p.toRaw)
			return nil
		default:
			return err
		}
	}
}

// pipeReader reads the chunks handed to the pack stage, returning each
// buffer to the pool once read.
type pipeReader struct {
	p   *pipeline
	cur chunk
	off int
}

func (r *pipeReader) Read(b []byte) (int, error) {
	if r.off == r.cur.n {
		if r.cur.buf != nil {
			r.p.free <- r.cur.buf // never blocks: the pool holds every buffer
			r.cur = chunk{}
		}
		select {
		case c, ok := <-r.p.toPack:
			if !ok {
				return 0, io.EOF
			}
			r.cur, r.off = c, 0
		case <-r.p.ctx.Done():
			return 0, r.p.ctx.Err()
		}
	}
	n := copy(b, r.cur.buf[r.off:r.cur.n])
	r.off += n
	return n, nil
}

// WriteTo hands whole chunks to w (the zstd encoder), saving a copy.
func (r *pipeReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if r.off < r.cur.n {
			n, err := w.Write(r.cur.buf[r.off:r.cur.n])
			total += int64(n)
			r.off += n
			if err != nil {
				return total, err
			}
		}
		var b [0]byte
		if _, err := r.Read(b[:]); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, err
		}
	}
}

// holdBackHash hashes everything written to it except the last 32 bytes,
// which it keeps: the hash of a stream whose checksum is appended to it.
// also (when set) gets the same bytes as h.
type holdBackHash struct {
	h    hash.Hash
	also io.Writer
	tail []byte
}

func (w *holdBackHash) pass(p []byte) {
	w.h.Write(p)
	if w.also != nil {
		w.also.Write(p)
	}
}

func (w *holdBackHash) Write(p []byte) (int, error) {
	if len(p) >= sha256.Size {
		w.pass(w.tail)
		w.pass(p[:len(p)-sha256.Size])
		w.tail = append(w.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	buf := append(append([]byte(nil), w.tail...), p...)
	if len(buf) > sha256.Size {
		w.pass(buf[:len(buf)-sha256.Size])
		buf = buf[len(buf)-sha256.Size:]
	}
	w.tail = buf
	return len(p), nil
}

// InspectRevision reads only what a backup needs from a snapshot database:
// the revision etcd would resume at and the compacted revision.
func InspectRevision(path string) (SnapshotInfo, error) {
	rev, compacted, err := datadir.Revisions(path)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("snapshot database: %w", err)
	}
	return SnapshotInfo{Revision: rev, CompactRevision: compacted}, nil
}

// SnapshotInfo is what a snapshot file itself says about its content.
type SnapshotInfo struct {
	Revision        int64
	CompactRevision int64
	Hash            uint32
	TotalKey        int
	Version         string
}

// Inspect opens a snapshot database read-only, checks its structure (bbolt's
// consistency check) and reads its revision, compacted revision and hash.
// The revision is the one etcd would resume at. The database is read in a
// child process (check.go): bbolt panics on some malformed files, and a
// panic there must not take Steward (the CLI, or the agent's automatic
// recovery) down; such a file is an error wrapping ErrMalformedSnapshot.
func Inspect(ctx context.Context, path string) (SnapshotInfo, error) {
	return inspectInChild(ctx, path, false)
}

// checkToWrite is Inspect for a database Steward made (a fetched or
// imported copy, removed if the check fails) and writes to next: the
// child opens it for writing, so bbolt's freelist, rebuilt by walking
// every page, is written back to the file, and the check and every later
// open (deltas, revision bump, membership, etcd's own) read it instead of
// walking the database again (snapshotStatus). Only the freelist and
// bbolt's meta page change: the keyspace, its hash and revisions do not.
// path must be the database alone, without etcd's appended checksum.
func checkToWrite(ctx context.Context, path string) (SnapshotInfo, error) {
	return inspectInChild(ctx, path, true)
}

// encoderConcurrency is how many goroutines zstd compresses a snapshot
// on: half the CPUs, at least one. zstd's default (all of them) is faster
// on an idle machine but spends more CPU for the same bytes (its
// hand-offs and copies: 120 MB of config maps at fastest, 0.43 s of CPU
// on two goroutines against 0.34 s on one, 0.27 s of wall time against
// 0.34 s), and a backup shares the control plane's CPUs with the leader
// serving the snapshot; on two CPUs that is one goroutine, beside the
// pipeline's receive stage (docs/benchmarks.md).
func encoderConcurrency() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// packStream compresses (zstd at level; levelNone: not at all) and
// optionally encrypts src into dst.
func packStream(dst io.Writer, src io.Reader, key *Key, level zstd.EncoderLevel) (int64, string, error) {
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(dst, h)}
	var sink io.Writer = cw
	var enc io.WriteCloser
	var err error
	if key != nil {
		if enc, err = NewEncryptWriter(cw, key); err != nil {
			return 0, "", err
		}
		sink = enc
	}
	if level == levelNone {
		if _, err := io.Copy(sink, src); err != nil {
			return 0, "", fmt.Errorf("pack: %w", err)
		}
	} else {
		zw, err := zstd.NewWriter(sink, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(encoderConcurrency()))
		if err != nil {
			return 0, "", err
		}
		if _, err := io.Copy(zw, src); err != nil {
			return 0, "", fmt.Errorf("compress: %w", err)
		}
		if err := zw.Close(); err != nil {
			return 0, "", err
		}
	}
	if enc != nil {
		if err := enc.Close(); err != nil {
			return 0, "", err
		}
	}
	return cw.n, hex.EncodeToString(h.Sum(nil)), nil
}

// ErrNeedKey: the backup is encrypted and no key was given to read it.
var ErrNeedKey = errors.New("no key given")

// ErrTooLarge: an object is not what its manifest says: it holds more
// bytes than the manifest's size, or decompresses to more than its raw size
// (a decompression bomb). Nothing past the limit is read or written.
var ErrTooLarge = errors.New("backup object exceeds its manifest's size")

// openObject opens a stored object and returns a reader of its plaintext.
// Before anything is decrypted or decompressed, it copies the object (at
// most the manifest's size plus one byte) into a temporary file in tmpDir
// ("" for the system's) and checks its size and SHA-256 against the
// manifest; the plaintext is capped at the manifest's raw size. Call finish
// after reading to the end: it checks that the plaintext is exactly the
// raw size. closeFn removes the temporary file.
func openObject(ctx context.Context, s Store, m Manifest, key *Key, tmpDir string) (r io.Reader, finish func() error, closeFn func(), err error) {
	if m.Encryption != "" {
		if key == nil {
			return nil, nil, nil, fmt.Errorf("backup %s is encrypted (key id %s): %w", m.ID, m.KeyID, ErrNeedKey)
		}
		if key.ID() != m.KeyID {
			return nil, nil, nil, fmt.Errorf("backup %s was encrypted with key id %s, but the key given has id %s: wrong key", m.ID, m.KeyID, key.ID())
		}
	}
	rc, err := s.Get(ctx, m.Object)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("backup %s: %w", m.ID, err)
	}
	f, err := os.CreateTemp(tmpDir, ".steward-object-*")
	if err != nil {
		rc.Close()
		return nil, nil, nil, fmt.Errorf("backup %s: %w", m.ID, err)
	}
	removeTemp := func() { f.Close(); os.Remove(f.Name()) }
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(pagecache.NewWriter(f), h), io.LimitReader(ctxReader{ctx, rc}, m.Size+1))
	rc.Close()
	if err != nil {
		removeTemp()
		return nil, nil, nil, fmt.Errorf("backup %s: download %s: %w", m.ID, m.Object, err)
	}
	if n > m.Size {
		removeTemp()
		return nil, nil, nil, fmt.Errorf("backup %s is corrupt: stored object is larger than the manifest's %d bytes (not decompressed): %w", m.ID, m.Size, ErrTooLarge)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 || n != m.Size {
		removeTemp()
		return nil, nil, nil, fmt.Errorf("backup %s is corrupt: stored object has %d bytes with SHA-256 %s, manifest says %d bytes with %s (not decompressed)",
			m.ID, n, got, m.Size, m.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		removeTemp()
		return nil, nil, nil, err
	}
	if m.Encryption == "" {
		key = nil // a key given for a plain backup is not used
	}
	zr, err := plaintext(pagecache.NewReader(f), m.Compression, key)
	if err != nil {
		removeTemp()
		return nil, nil, nil, fmt.Errorf("backup %s: %w", m.ID, err)
	}
	out := &cappedReader{r: zr, left: m.RawSize, id: m.ID, raw: m.RawSize}
	finish = func() error {
		if _, err := io.Copy(io.Discard, out); err != nil {
			return fmt.Errorf("backup %s is corrupt: %w", m.ID, err)
		}
		if out.left != 0 {
			return fmt.Errorf("backup %s is corrupt: it decompresses to %d bytes, manifest says %d", m.ID, m.RawSize-out.left, m.RawSize)
		}
		return nil
	}
	return out, finish, func() { zr.Close(); removeTemp() }, nil
}

// cappedReader reads at most left bytes of plaintext and fails, rather
// than reading further, when there is more.
type cappedReader struct {
	r    io.Reader
	left int64
	id   string
	raw  int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		var probe [1]byte
		n, err := io.ReadFull(c.r, probe[:])
		if n > 0 {
			return 0, fmt.Errorf("backup %s decompresses to more than the manifest's %d bytes: %w", c.id, c.raw, ErrTooLarge)
		}
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// ReadBack reads a stored backup back from the store: its manifest must
// verify and be m, and its object must have m's size and SHA-256.
func ReadBack(ctx context.Context, s Store, auth *AuthKey, m Manifest) error {
	if err := readBackManifest(ctx, s, auth, m); err != nil {
		return err
	}
	return readBackObject(ctx, s, m)
}

// ReadBackFile is ReadBack for a backup whose object was stored from the
// local file at path, whose bytes were hashed (m.SHA256) as they were
// written to it. When the store holds that very file (a local store
// hard-links it: HoldsFile), reading it again would be answered by the
// page cache with the bytes just hashed, which proves nothing more than
// that the stored name is that file with m's size: that is what is
// checked then, without reading it. Any other store (S3, or a local one
// on another file system, which copied the file) is read back in full.
func ReadBackFile(ctx context.Context, s Store, auth *AuthKey, m Manifest, path string) error {
	if err := readBackManifest(ctx, s, auth, m); err != nil {
		return err
	}
	fh, ok := s.(fileHolder)
	if !ok {
		return readBackObject(ctx, s, m)
	}
	same, err := fh.HoldsFile(m.Object, path)
	if err != nil {
		return fmt.Errorf("read back backup %s from %s: %w", m.ID, s, err)
	}
	if !same {
		return readBackObject(ctx, s, m)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read back backup %s from %s: %w", m.ID, s, err)
	}
	if fi.Size() != m.Size {
		return fmt.Errorf("read back backup %s from %s: the stored object holds %d bytes, %d were written", m.ID, s, fi.Size(), m.Size)
	}
	return nil
}

// readBackManifest checks that the stored manifest of m verifies and is m.
func readBackManifest(ctx context.Context, s Store, auth *AuthKey, m Manifest) error {
	got, err := readManifest(ctx, s, manifestName(m.Kind, m.ID), auth)
	if err != nil {
		return fmt.Errorf("read back backup %s from %s: %w", m.ID, s, err)
	}
	if got.MAC != m.MAC {
		return fmt.Errorf("read back backup %s from %s: the stored manifest is not the one written", m.ID, s)
	}
	return nil
}

// readBackObject reads m's object from the store and checks its size and
// SHA-256.
func readBackObject(ctx context.Context, s Store, m Manifest) error {
	rc, err := s.Get(ctx, m.Object)
	if err != nil {
		return fmt.Errorf("read back backup %s: %w", m.ID, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(ctxReader{ctx, rc}, m.Size+1))
	if err != nil {
		return fmt.Errorf("read back backup %s: %w", m.ID, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != m.Size || sum != m.SHA256 {
		return fmt.Errorf("read back backup %s from %s: the store returned %d bytes with SHA-256 %s, %d bytes with %s were written", m.ID, s, n, sum, m.Size, m.SHA256)
	}
	return nil
}

// ErrNoAuthKey: a backup cannot be stored without the cluster backup key
// that authenticates its manifest.
var ErrNoAuthKey = errors.New("no cluster backup key to authenticate the manifest with")

// putWithManifest authenticates m under auth, stores the object, then the
// manifest (the commit point). An object that is a file (a full snapshot)
// goes to a FilePutter without a copy.
func putWithManifest(ctx context.Context, s Store, auth *AuthKey, m *Manifest, obj io.Reader) error {
	return putWithManifestHook(ctx, s, auth, m, obj, nil)
}

// putWithManifestHook is putWithManifest calling between (when set) after
// the object is stored and before the manifest (a crash point).
func putWithManifestHook(ctx context.Context, s Store, auth *AuthKey, m *Manifest, obj io.Reader, between func()) error {
	if auth == nil {
		return fmt.Errorf("store backup %s: %w", m.ID, ErrNoAuthKey)
	}
	m.Object = objectOf(m)
	auth.Seal(m)
	if err := checkManifest(m); err != nil {
		return fmt.Errorf("store backup %s: %w", m.ID, err)
	}
	put := func() error { return s.Put(ctx, m.Object, obj) }
	if f, ok := obj.(*os.File); ok {
		if fp, ok := s.(FilePutter); ok {
			put = func() error { return fp.PutFile(ctx, m.Object, f.Name()) }
		}
	}
	if err := put(); err != nil {
		return fmt.Errorf("upload %s to %s: %w", m.Object, s, err)
	}
	if between != nil {
		between()
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	name := manifestName(m.Kind, m.ID)
	if err := s.Put(ctx, name, bytes.NewReader(b)); err != nil {
		// The manifest may be stored all the same (a retried PUT whose
		// first attempt landed answers "already exists"; a local store's
		// directory sync failing after the link): then the backup is
		// committed, and deleting its object would leave a trusted
		// manifest without it, breaking every restore past it. Read it
		// back: the same bytes are a success; the object is deleted only
		// when the manifest is surely absent.
		switch got, gerr := readAll(ctx, s, name); {
		case gerr == nil && bytes.Equal(got, b):
			return nil
		case errors.Is(gerr, ErrNotExist):
			_ = s.Delete(ctx, m.Object)
		}
		return fmt.Errorf("upload manifest of %s: %w", m.ID, err)
	}
	return nil
}

// readAll reads a stored object whole (at most maxManifestBytes: a
// manifest).
func readAll(ctx context.Context, s Store, name string) ([]byte, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, maxManifestBytes))
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Fetch downloads a full backup into dst (a snapshot database with etcd's
// checksum appended, as etcdutl restore expects) and checks everything: the
// stored object's size and SHA-256, the key, decryption and decompression,
// etcd's checksum, the database's consistency, and that its revision and
// hash are the manifest's.
func Fetch(ctx context.Context, s Store, m Manifest, key *Key, dst string) error {
	return fetch(ctx, s, m, key, dst, true)
}

// FetchDatabase is Fetch writing the database alone to dst, without etcd's
// appended checksum (checked as it streams by): a database ready to be
// written to (deltas, a revision bump) or to become a member's. Its check
// opens it for writing (checkToWrite), so dst holds bbolt's freelist,
// which no later open has to rebuild by walking every page; the keyspace
// is the snapshot's.
func FetchDatabase(ctx context.Context, s Store, m Manifest, key *Key, dst string) error {
	return fetch(ctx, s, m, key, dst, false)
}

// fetch is Fetch, with etcd's appended checksum kept in dst or not. Every
// byte is read once from the store and written once to dst, hashed on the
// way; the consistency check then walks dst (snapshotStatus: twice, the
// walk that rebuilds bbolt's freelist and the hash). The download is
// dropped from the page cache as it is read, and neither file leaves more
// than a few chunks dirty (a restore within a memory limit).
func fetch(ctx context.Context, s Store, m Manifest, key *Key, dst string, keepHash bool) (err error) {
	if m.Kind != KindFull {
		return fmt.Errorf("backup %s is a %s backup; restore needs a full one", m.ID, m.Kind)
	}
	r, finish, closeFn, err := openObject(ctx, s, m, key, filepath.Dir(dst))
	if err != nil {
		return err
	}
	defer closeFn()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// A backup that fails a check leaves no (decrypted) copy behind.
	defer func() {
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	pw := pagecache.NewWriter(out)
	h := sha256.New()
	var w io.Writer
	var tail func() []byte
	if keepHash {
		hb := &holdBackHash{h: h}
		w, tail = io.MultiWriter(pw, hb), func() []byte { return hb.tail }
	} else {
		hb := &holdBack{w: io.MultiWriter(pw, h)}
		w, tail = hb, func() []byte { return hb.tail }
	}
	n, err := io.Copy(w, r)
	if err == nil {
		err = pw.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backup %s is corrupt: %w", m.ID, err)
	}
	if err := finish(); err != nil {
		return err
	}
	if n < sha256.Size || (n-sha256.Size)%512 != 0 {
		return fmt.Errorf("backup %s: snapshot of %d bytes carries no etcd checksum: the stream was cut short", m.ID, n)
	}
	if !bytes.Equal(h.Sum(nil), tail()) {
		return fmt.Errorf("backup %s: snapshot checksum mismatch: the data etcd sent does not match the SHA-256 it appended", m.ID)
	}
	// A database fetched to be written to is checked by an open for
	// writing (checkToWrite: no later open walks it for its freelist).
	inspect := Inspect
	if !keepHash {
		inspect = checkToWrite
	}
	info, err := inspect(ctx, dst)
	if err != nil {
		return fmt.Errorf("backup %s: %w", m.ID, err)
	}
	if info.Revision != m.EndRevision || (m.SnapshotHash != 0 && info.Hash != m.SnapshotHash) {
		return fmt.Errorf("backup %s: snapshot holds revision %d with hash %d, manifest says revision %d with hash %d",
			m.ID, info.Revision, info.Hash, m.EndRevision, m.SnapshotHash)
	}
	return nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
