package backup

import (
	"encoding/binary"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/etcd-steward/steward/internal/pagecache"
)

// BumpRevision does to a snapshot database what etcdutl's restore does with
// --bump-revision and --mark-compacted, in the same bytes: it writes an
// empty marker key at revision newest+amount into the key bucket and
// records that revision as scheduled for compaction, so the restored etcd
// resumes above every revision a client may have seen, and a watch from an
// older revision gets a compaction error instead of silently missing
// changes. It returns the bumped revision.
//
// Unlike etcdutl, which walks the whole key bucket to find the newest
// revision (a full read of the database, slow when memory is tight), it
// reads the bucket's last key: keys are big-endian revisions, so the last
// one is the newest. It also counts an already recorded compaction, which
// may be newer than every remaining key (a compacted-away tombstone).
func BumpRevision(path string, amount int64) (int64, error) {
	return BumpRevisionAbove(path, 0, amount)
}

// BumpRevisionAbove is BumpRevision from the higher of the database's
// newest revision and floor: a restore passes the highest revision the
// cluster ever served or stored on any timeline, so the restored etcd
// resumes above all of them, not just above the revision it restored.
func BumpRevisionAbove(path string, floor, amount int64) (int64, error) {
	if amount <= 0 {
		return 0, fmt.Errorf("bump revision: amount %d must be positive", amount)
	}
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("bump revision: %w", err) // bolt.Open would create it
	}
	// A database etcd wrote (from a snapshot file, with no deltas applied)
	// has no synced freelist: opening it walks every page.
	stop := pagecache.Prefetch(path)
	db, err := bolt.Open(path, 0o600, nil)
	stop()
	if err != nil {
		return 0, fmt.Errorf("bump revision: open %s: %w", path, err)
	}
	var bumped int64
	err = db.Update(func(tx *bolt.Tx) (err error) {
		kb, mb := tx.Bucket([]byte("key")), tx.Bucket([]byte("meta"))
		if kb == nil || mb == nil {
			return fmt.Errorf("%s is not an etcd database (no key or meta bucket)", path)
		}
		newest := int64(0)
		if k, _ := kb.Cursor().Last(); len(k) >= 8 {
			newest = int64(binary.BigEndian.Uint64(k))
		}
		for _, name := range []string{"scheduledCompactRev", "finishedCompactRev"} {
			if v := mb.Get([]byte(name)); len(v) >= 8 {
				newest = max(newest, int64(binary.BigEndian.Uint64(v)))
			}
		}
		if bumped, err = ResumeRevision(max(newest, floor), 0, amount); err != nil {
			return err
		}
		if err := kb.Put(revBytes(bumped), []byte{}); err != nil {
			return err
		}
		return mb.Put([]byte("scheduledCompactRev"), revBytes(bumped))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("bump revision of %s: %w", path, err)
	}
	return bumped, nil
}

// revBytes is etcd's 17-byte revision key of main (sub-revision 0).
func revBytes(main int64) []byte {
	b := make([]byte, 17)
	putRevKey(b, main, 0)
	return b
}

// putRevKey writes etcd's revision key into dst[:17]: main big-endian, '_',
// sub big-endian. Apply reuses one buffer for every event.
func putRevKey(dst []byte, main, sub int64) {
	binary.BigEndian.PutUint64(dst, uint64(main))
	dst[8] = '_'
	binary.BigEndian.PutUint64(dst[9:], uint64(sub))
}
