package backup

import (
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// keyspaceBuckets are the buckets of an etcd database that hold what
// clients wrote: keys with their whole MVCC history, leases, and auth.
// Their record formats (mvccpb.KeyValue, leasepb.Lease, authpb) have not
// changed across etcd 3.x.
var keyspaceBuckets = []string{"key", "lease", "auth", "authUsers", "authRoles"}

// compactionMarks are the meta keys that say how far the key bucket was
// compacted; they travel with it.
var compactionMarks = []string{"scheduledCompactRev", "finishedCompactRev"}

// graftBatch bounds the records written per transaction, so a large
// keyspace does not sit in one transaction's dirty pages.
const graftBatch = 10000

// Graft replaces the keyspace of the snapshot database dst (without
// etcd's appended checksum) with that of the etcd database src: the key,
// lease and auth buckets and the compaction marks are copied from src;
// every other bucket of dst (membership, meta, what its version's schema
// adds) stays as it was. This is how Steward goes back to an older etcd
// version without online downgrade: dst is a backup taken on that version
// (so its schema is one the version reads), src is the database the newer
// version wrote since, holding every write made after the upgrade, with
// its revisions, deletions and compactions exactly.
func Graft(dst, src string) error {
	sdb, err := bolt.Open(src, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("open source database %s: %w", src, err)
	}
	defer sdb.Close()
	ddb, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
	if err != nil {
		return fmt.Errorf("open snapshot database %s: %w", dst, err)
	}
	defer ddb.Close()
	stx, err := sdb.Begin(false)
	if err != nil {
		return err
	}
	defer stx.Rollback()
	if stx.Bucket([]byte("key")) == nil {
		return fmt.Errorf("%s has no key bucket: not an etcd v3 database", src)
	}
	for _, name := range keyspaceBuckets {
		if err := graftBucket(ddb, stx, name); err != nil {
			return fmt.Errorf("graft bucket %s: %w", name, err)
		}
	}
	err = ddb.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket([]byte("meta"))
		if mb == nil {
			return errors.New("snapshot database has no meta bucket")
		}
		smb := stx.Bucket([]byte("meta"))
		for _, k := range compactionMarks {
			var v []byte
			if smb != nil {
				v = smb.Get([]byte(k))
			}
			if v == nil {
				if err := mb.Delete([]byte(k)); err != nil {
					return err
				}
				continue
			}
			if err := mb.Put([]byte(k), append([]byte(nil), v...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return ddb.Sync()
}

// graftBucket empties bucket name of ddb and copies src's into it, in
// batches of graftBatch records. A bucket src lacks is left empty.
func graftBucket(ddb *bolt.DB, stx *bolt.Tx, name string) error {
	err := ddb.Update(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte(name)) != nil {
			if err := tx.DeleteBucket([]byte(name)); err != nil {
				return err
			}
		}
		_, err := tx.CreateBucket([]byte(name))
		return err
	})
	if err != nil {
		return err
	}
	sb := stx.Bucket([]byte(name))
	if sb == nil {
		return nil
	}
	cur := sb.Cursor()
	k, v := cur.First()
	for k != nil {
		err := ddb.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(name))
			b.FillPercent = 0.9 // keys arrive in order
			for n := 0; k != nil && n < graftBatch; n++ {
				if err := b.Put(append([]byte(nil), k...), append([]byte(nil), v...)); err != nil {
					return err
				}
				k, v = cur.Next()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
