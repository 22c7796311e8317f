package backup

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/scratch"
)

// Delta compaction folds a full backup and the deltas that continue it into
// a new full backup, from the backup store alone: the live cluster is not
// asked for anything. A restore from the new full backup replays only the
// deltas stored after it, so restore time stays bounded however long the
// cluster runs (as etcd-druid's compactor does). The folded database is
// compacted at the chain's end (compactDatabase): a restore marks every
// revision before its own compacted anyway, so only the history nobody can
// read after a restore goes, and the backup's size follows the live
// keyspace rather than the cluster's age.
//
// The new full backup is an ordinary one (authenticated manifest, the
// cluster's encryption, etcd's checksum appended, a consistent database
// with its hash in the manifest), so restore, verify and retention treat it
// like any other. Its manifest, the commit point, is stored only after the
// exact object stored was read back through every check restore makes and
// its keyspace digest equals that of the chain replayed: a compaction that
// fails or crashes leaves at most an object without a manifest (ignored by
// everything), never an unverified full backup. Compaction deletes
// nothing; the folded chain stays until retention removes it.

// Crash points of a compaction (internal/crashpoint).
const (
	// CrashCompactBeforeManifest is hit after the new full backup's object
	// is stored, before its manifest.
	CrashCompactBeforeManifest = "backup-compact-before-manifest"
	// CrashCompactAfterManifest is hit after the manifest is stored, before
	// it is read back.
	CrashCompactAfterManifest = "backup-compact-after-manifest"
)

// CompactBounds say when a chain is long enough to compact: once its
// deltas reach Deltas segments, or Bytes stored bytes. A zero bound is no
// bound; with both zero a chain is never due.
type CompactBounds struct {
	Deltas int
	Bytes  int64
}

// ChainBytes is the stored size of a chain's deltas.
func ChainBytes(c Chain) int64 {
	var n int64
	for _, d := range c.Deltas {
		n += d.Size
	}
	return n
}

// CompactionDue reports whether the chain after a full backup has grown
// past the bounds.
func CompactionDue(c Chain, b CompactBounds) bool {
	return b.Reached(len(c.Deltas), ChainBytes(c))
}

// Reached reports whether a chain of deltas segments holding bytes stored
// bytes has reached either bound (never without a delta).
func (b CompactBounds) Reached(deltas int, bytes int64) bool {
	if deltas <= 0 {
		return false
	}
	return (b.Deltas > 0 && deltas >= b.Deltas) || (b.Bytes > 0 && bytes >= b.Bytes)
}

// CompactOptions configure Compact.
type CompactOptions struct {
	// Chain is the full backup and the deltas to fold into one (BuildChain).
	Chain Chain
	// Key reads the chain and encrypts the new full backup (nil: none).
	Key *Key
	// Auth is the cluster backup key that authenticates the new manifest
	// (required).
	Auth *AuthKey
	// TempDir holds the folded database while it is built and checked
	// (default os.TempDir()).
	TempDir string
	// Fence, when set, is asked just before the manifest is stored: an
	// error stops the compaction (a backup leader that lost its election).
	Fence func() error
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Compression is the zstd level of the new full backup, a
	// backup.compression value ("": CompressionFastest).
	Compression string
}

// CompactResult is a compaction done.
type CompactResult struct {
	// Backup is the new full backup.
	Backup Manifest
	// Digest is the keyspace digest (KeyspaceDigest) of the chain replayed,
	// which the stored backup was checked to have.
	Digest string
}

// Compact folds o.Chain into a new full backup at the chain's end,
// compacted at that revision (its StartRevision is its EndRevision), and
// stores it (see the comment at the top of this file for what it checks
// before its manifest is stored). It deletes nothing.
func Compact(ctx context.Context, s Store, o CompactOptions) (CompactResult, error) {
	ch := o.Chain
	if len(ch.Deltas) == 0 {
		return CompactResult{}, fmt.Errorf("compact %s: no deltas continue it; nothing to fold", ch.Full.ID)
	}
	if o.Auth == nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, ErrNoAuthKey)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	end := ch.Deltas[len(ch.Deltas)-1].EndRevision
	sd, err := scratch.New(o.TempDir, "steward-compact-")
	if err != nil {
		return CompactResult{}, err
	}
	defer sd.Remove()
	tmp := sd.Path

	// The chain replayed, as a restore would: the full backup fetched and
	// checked, its deltas applied.
	db := filepath.Join(tmp, "folded.db")
	if err := FetchDatabase(ctx, s, ch.Full, o.Key, db); err != nil {
		return CompactResult{}, fmt.Errorf("compact: %w", err)
	}
	last, err := Apply(ctx, s, o.Key, db, ch.Full.EndRevision, ch.Deltas, ApplyOptions{})
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: replay its deltas: %w", ch.Full.ID, err)
	}
	if last != end {
		return CompactResult{}, fmt.Errorf("compact %s: its deltas end at revision %d, the replay at %d", ch.Full.ID, end, last)
	}
	want, err := KeyspaceDigest(ctx, db)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	// The history goes, as a restore would drop it: compacted at the
	// chain's end into a new file.
	replayed := db
	db = filepath.Join(tmp, "compacted.db")
	if err := compactDatabase(ctx, replayed, db, end); err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	if err := os.Remove(replayed); err != nil {
		return CompactResult{}, err
	}
	rawSize, err := appendChecksum(ctx, db)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	info, err := Inspect(ctx, db)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: the folded database: %w", ch.Full.ID, err)
	}
	if info.Revision != end || info.CompactRevision != end {
		return CompactResult{}, fmt.Errorf("compact %s: the folded database holds revision %d compacted at %d, the chain ends at %d", ch.Full.ID, info.Revision, info.CompactRevision, end)
	}

	packed := filepath.Join(tmp, "folded.pack")
	level, err := CompressionLevel(o.Compression)
	if err != nil {
		return CompactResult{}, err
	}
	size, sum, err := packFile(ctx, packed, db, o.Key, level)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	// Disk space: the database is read back from the packed object below.
	if err := os.Remove(db); err != nil {
		return CompactResult{}, err
	}
	now := o.Now().UTC()
	m := Manifest{
		ID: NewID(KindFull, now, end), Kind: KindFull, ClusterID: ch.Full.ClusterID,
		Member: ch.Full.Member, StartRevision: end, EndRevision: end,
		EtcdVersion: ch.Full.EtcdVersion, RawSize: rawSize, SnapshotHash: info.Hash, TotalKeys: info.TotalKey,
		Compression: compressionOf(level), CreatedAt: now, Size: size, SHA256: sum, CompactedFrom: ch.Full.ID,
		Lineage: ch.Full.Lineage, // the chain's timeline
	}
	if o.Key != nil {
		m.Encryption, m.KeyID = encAlgorithm, o.Key.ID()
	}
	m.Object = objectOf(&m)

	// The object as it will be stored, read back through every check a
	// restore makes (a store in the temporary dir holds it), must hold the
	// chain's keyspace.
	if err := checkFolded(ctx, tmp, packed, m, o.Key, want); err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	if o.Fence != nil {
		if err := o.Fence(); err != nil {
			return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
		}
	}
	f, err := os.Open(packed)
	if err != nil {
		return CompactResult{}, err
	}
	defer f.Close()
	if err := putWithManifestHook(ctx, s, o.Auth, &m, f, func() { crashpoint.Hit(CrashCompactBeforeManifest) }); err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	crashpoint.Hit(CrashCompactAfterManifest)
	// The store kept exactly the bytes checked above (size and SHA-256).
	if err := ReadBackFile(ctx, s, o.Auth, m, packed); err != nil {
		return CompactResult{Backup: m, Digest: want}, fmt.Errorf("compact %s: %w", ch.Full.ID, err)
	}
	return CompactResult{Backup: m, Digest: want}, nil
}

// checkFolded stores the packed object with its manifest in a store in dir
// and fetches it back as a restore would (size, SHA-256, decryption,
// decompression, etcd's checksum, the database's consistency, revision and
// hash), then compares its keyspace digest with want.
func checkFolded(ctx context.Context, dir, packed string, m Manifest, key *Key, want string) error {
	ls, err := NewLocalStore(filepath.Join(dir, "check"))
	if err != nil {
		return err
	}
	defer os.RemoveAll(ls.Dir)
	f, err := os.Open(packed)
	if err != nil {
		return err
	}
	err = ls.Put(ctx, m.Object, f)
	f.Close()
	if err != nil {
		return err
	}
	back := filepath.Join(dir, "check.db")
	if err := FetchDatabase(ctx, ls, m, key, back); err != nil {
		return fmt.Errorf("the folded backup fails its checks: %w", err)
	}
	defer os.Remove(back)
	got, err := KeyspaceDigest(ctx, back)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("the folded backup's keyspace digest %s differs from the chain's %s: not storing it", got, want)
	}
	return nil
}

// appendChecksum appends the SHA-256 of a database file to it, as etcd does
// to a snapshot, and returns the new size.
func appendChecksum(ctx context.Context, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return n + sha256.Size, f.Close()
}

// packFile packs (zstd, optionally encrypted) src into a new file dst.
func packFile(ctx context.Context, dst, src string, key *Key, level zstd.EncoderLevel) (int64, string, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, "", err
	}
	defer out.Close()
	size, sum, err := packStream(out, ctxReader{ctx, in}, key, level)
	if err != nil {
		return 0, "", err
	}
	if err := out.Sync(); err != nil {
		return 0, "", err
	}
	return size, sum, out.Close()
}

// KeyspaceDigest is the SHA-256 (hex) of what a restore of an etcd
// database (without etcd's appended checksum) keeps of what clients wrote:
// the newest record of every key that is not deleted (liveRecords: a
// restore marks every older revision compacted, and etcd drops them when it
// starts), newest first, each with its revision; then every record of the
// lease and auth buckets in key order. Each part is length-prefixed.
// Membership and meta records (which a restore rewrites) are not covered.
func KeyspaceDigest(ctx context.Context, path string) (string, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return "", fmt.Errorf("open database %s: %w", path, err)
	}
	defer db.Close()
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	err = db.View(func(tx *bolt.Tx) error {
		kb := tx.Bucket([]byte("key"))
		if kb == nil {
			return fmt.Errorf("%s has no key bucket: not an etcd v3 database", path)
		}
		put([]byte("key"))
		if err := liveRecords(ctx, kb, func(k, v []byte) error { put(k); put(v); return nil }); err != nil {
			return err
		}
		for _, name := range keyspaceBuckets[1:] {
			put([]byte(name))
			b := tx.Bucket([]byte(name))
			if b == nil {
				continue
			}
			if err := b.ForEach(func(k, v []byte) error { put(k); put(v); return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// liveRecords calls fn, newest first, with every record of an etcd key
// bucket that is the newest of its key and not a deletion: what etcd keeps
// of the bucket when it compacts at its newest revision. Records without a
// value (a restore's revision marker) are not any key's.
func liveRecords(ctx context.Context, kb *bolt.Bucket, fn func(rev, v []byte) error) error {
	seen := map[string]struct{}{}
	var kv mvccpb.KeyValue
	c := kb.Cursor()
	n := 0
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		if n++; n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if len(v) == 0 {
			continue
		}
		if err := kv.Unmarshal(v); err != nil {
			return fmt.Errorf("key bucket record %x: %w", k, err)
		}
		if _, ok := seen[string(kv.Key)]; ok {
			continue
		}
		seen[string(kv.Key)] = struct{}{}
		if len(k) == 18 && k[17] == 't' {
			continue // deleted: a compaction drops the key
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// compactDatabase writes to dst (a new file) the etcd database src
// compacted at its newest revision rev, as etcd's compaction and
// defragmentation would leave it: of the key bucket only liveRecords, every
// other bucket as it is, and the compaction marks set to rev. The history
// a delta chain accumulates goes, so the folded backup's size follows the
// live keyspace, not the cluster's age.
func compactDatabase(ctx context.Context, src, dst string, rev int64) error {
	sdb, err := bolt.Open(src, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("open database %s: %w", src, err)
	}
	defer sdb.Close()
	ddb, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
	if err != nil {
		return fmt.Errorf("open database %s: %w", dst, err)
	}
	defer ddb.Close()
	stx, err := sdb.Begin(false)
	if err != nil {
		return err
	}
	defer stx.Rollback()
	kb := stx.Bucket([]byte("key"))
	if kb == nil {
		return fmt.Errorf("%s has no key bucket: not an etcd v3 database", src)
	}
	live := map[string]struct{}{}
	if err := liveRecords(ctx, kb, func(k, _ []byte) error { live[string(k)] = struct{}{}; return nil }); err != nil {
		return err
	}
	err = stx.ForEach(func(name []byte, b *bolt.Bucket) error {
		keep := func([]byte) bool { return true }
		if string(name) == "key" {
			keep = func(k []byte) bool { _, ok := live[string(k)]; return ok }
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return copyBucket(ddb, string(name), b, keep)
	})
	if err != nil {
		return err
	}
	err = ddb.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket([]byte("meta"))
		if mb == nil {
			return fmt.Errorf("%s has no meta bucket: not an etcd v3 database", src)
		}
		for _, k := range compactionMarks {
			if err := mb.Put([]byte(k), revBytes(rev)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := ddb.Sync(); err != nil {
		return err
	}
	return ddb.Close()
}

// copyBucket creates bucket name in ddb and copies into it, in batches of
// graftBatch, the records of b that keep accepts. etcd's buckets hold no
// nested buckets; one is refused.
func copyBucket(ddb *bolt.DB, name string, b *bolt.Bucket, keep func(k []byte) bool) error {
	err := ddb.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte(name))
		return err
	})
	if err != nil {
		return fmt.Errorf("bucket %s: %w", name, err)
	}
	cur := b.Cursor()
	k, v := cur.First()
	for k != nil {
		err := ddb.Update(func(tx *bolt.Tx) error {
			db := tx.Bucket([]byte(name))
			db.FillPercent = 0.9 // keys arrive in order
			for n := 0; k != nil && n < graftBatch; k, v = cur.Next() {
				if v == nil {
					return fmt.Errorf("bucket %s holds a nested bucket %q: not an etcd database", name, k)
				}
				if !keep(k) {
					continue
				}
				if err := db.Put(append([]byte(nil), k...), append([]byte(nil), v...)); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
	}
	return nil
}
