package backup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"golang.org/x/sys/unix"

	"github.com/etcd-steward/steward/internal/pagecache"
)

// snapshotStatus is etcdutl's snapshot status (etcdutl/snapshot/
// v3_snapshot.go, Status; Apache-2.0, The etcd Authors): bbolt's
// consistency check, then the CRC-32C of every bucket name, key and value,
// the newest revision, the number of live keys and the storage version,
// all as etcdutl computes them. Two things differ: how often the file is
// walked, and how the kernel reads it.
//
// etcdutl walks the database three times: bbolt rebuilds the freelist
// (etcd does not write it to the file) by a walk of every page that makes
// the checks of bbolt's check, its check walks again, then the hash reads
// every key and value. Here:
//
//   - The check and the hash run side by side, in two read transactions,
//     so the pages one of them faults in are in memory when the other
//     reaches them.
//   - With prepare (a database Steward made and writes to next), the
//     database is opened for writing, as a restore's replay would open
//     it: bbolt rebuilds the freelist and writes it back to the file
//     (NoFreelistSync off), so no later open walks it again (the replay,
//     the revision bump, the membership rewrite, etcd's own start). When
//     that open walked (neither meta page names a written freelist), the
//     walk was bbolt's check (tx.Check's walk, with any finding a panic:
//     in the child process, ErrMalformedSnapshot), and what the check adds
//     to it, that the freelist and the reachable pages cover the file
//     once, holds for a freelist made of the pages the walk did not
//     reach: only the hash walks again. A freelist read from the file is
//     checked by tx.Check, as without prepare.
//
// bbolt advises its memory map MADV_RANDOM, so every page a walk faults
// in is one 4 KiB read; when the database is larger than the memory left
// to the check (a restore inside a memory cgroup) a walk becomes hundreds
// of thousands of small reads. The walks go mostly in file order, so the
// map is advised MADV_NORMAL here, and the kernel reads around each fault
// (during the open for writing, whose walk runs before Open returns the
// map, by pagecache.ReadAround). A sequential read ahead of that walk
// (pagecache.Prefetch) is as fast when the file fits in memory, but in a
// 512 MB group it runs so far ahead that its reads are evicted before the
// walk reaches them: 7.1 s for a 1 GB database there, 4.1 s with
// read-around (docs/benchmarks.md).
func snapshotStatus(path string, prepare bool) (ds snapshot.Status, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return ds, err
	}
	opts := &bolt.Options{ReadOnly: true}
	mode := os.FileMode(0o400)
	walked := false
	stop := func() {}
	if prepare {
		opts, mode = &bolt.Options{Timeout: time.Second}, 0o600
		walked = freelistUnwritten(path)
		stop = pagecache.ReadAround(path)
	}
	db, err := bolt.Open(path, mode, opts)
	stop()
	if err != nil {
		return ds, err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if n := fi.Size(); n > 0 {
		// The map starts at Data and covers at least the file. Advice
		// only: on failure the walks are just slower.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, db.Info().Data, uintptr(n), unix.MADV_NORMAL)
	}
	if walked {
		err = db.View(func(tx *bolt.Tx) error {
			ds, err = hashKeyspace(tx)
			return err
		})
		return ds, err
	}

	// The check and the hash, each in its own read transaction. Both begin
	// before the check starts, and both end after it has finished: read
	// only, bbolt loads the freelist inside the check (a walk, when it is
	// not written) and reads it as a transaction begins or ends, without a
	// lock between the two.
	checkTx, err := db.Begin(false)
	if err != nil {
		return ds, err
	}
	defer func() { _ = checkTx.Rollback() }()
	hashTx, err := db.Begin(false)
	if err != nil {
		return ds, err
	}
	defer func() { _ = hashTx.Rollback() }()
	var dbErrs []string // written by the check's goroutine, read after done
	done := make(chan struct{})
	go func() {
		defer close(done)
		for dbErr := range checkTx.Check() {
			dbErrs = append(dbErrs, dbErr.Error())
		}
	}()
	// Registered after the rollbacks, so it runs before them, also when
	// the hash panics.
	defer func() { <-done }()
	ds, hashErr := hashKeyspace(hashTx)
	<-done
	if len(dbErrs) > 0 {
		return ds, fmt.Errorf("snapshot file integrity check failed. %d errors found.\n%s", len(dbErrs), strings.Join(dbErrs, "\n"))
	}
	return ds, hashErr
}

// freelistUnwritten reports whether both meta pages of the bbolt database
// at path say it has no freelist written to the file (etcd's databases):
// an open for writing then rebuilds it by walking every page, whichever
// meta page bbolt picks. False when a meta page cannot be read.
func freelistUnwritten(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	// A meta page: its page header (16 bytes), then magic, version, page
	// size, flags (4 bytes each), the root bucket (16), the freelist's
	// page ID (8: all ones for none), the high water mark, txid, checksum.
	const magic, none = 0xED0CDAED, ^uint64(0)
	var m [64]byte
	pageSize := int64(0)
	for i := range int64(2) {
		if _, err := f.ReadAt(m[:], i*pageSize); err != nil {
			return false
		}
		if binary.LittleEndian.Uint32(m[16:]) != magic || binary.LittleEndian.Uint64(m[48:]) != none {
			return false
		}
		if i == 0 {
			if pageSize = int64(binary.LittleEndian.Uint32(m[24:])); pageSize < 1024 {
				return false
			}
		}
	}
	return true
}

// hashKeyspace is the hash half of snapshotStatus: the CRC-32C of every
// bucket name, key and value in tx, the newest revision, the live keys,
// the size and the storage version, as etcdutl's snapshot status.
func hashKeyspace(tx *bolt.Tx) (ds snapshot.Status, err error) {
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	seenKeys := make(map[string]struct{})
	ds.TotalSize = tx.Size()
	if v := schema.ReadStorageVersionFromSnapshot(tx); v != nil {
		ds.Version = v.String()
	}
	c := tx.Cursor()
	for next, _ := c.First(); next != nil; next, _ = c.Next() {
		b := tx.Bucket(next)
		if b == nil {
			return ds, fmt.Errorf("nil bucket: %q", string(next))
		}
		h.Write(next)
		iskeyb := bytes.Equal(next, schema.Key.Name())
		if err := b.ForEach(func(k, v []byte) error {
			h.Write(k)
			h.Write(v)
			if !iskeyb {
				return nil
			}
			rev, err := bytesToRev(k)
			if err != nil {
				return fmt.Errorf("cannot parse revision key: %q err: %w", k, err)
			}
			ds.Revision = rev.Main
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(v); err != nil {
				return fmt.Errorf("cannot unmarshal value, key: %q value: %q err: %w", k, v, err)
			}
			if !mvcc.IsTombstone(k) {
				seenKeys[string(kv.Key)] = struct{}{}
			} else {
				delete(seenKeys, string(kv.Key))
			}
			return nil
		}); err != nil {
			return ds, fmt.Errorf("error during bucket key iteration, name: %q err: %w", string(next), err)
		}
	}
	ds.TotalKey = len(seenKeys)
	ds.Hash = h.Sum32()
	return ds, nil
}

// bytesToRev is mvcc.BytesToRev, with its panic on a short key an error.
func bytesToRev(b []byte) (rev mvcc.Revision, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s", r)
		}
	}()
	return mvcc.BytesToRev(b), nil
}
