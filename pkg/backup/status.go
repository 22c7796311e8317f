package backup

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"os"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"golang.org/x/sys/unix"
)

// snapshotStatus is etcdutl's snapshot status (etcdutl/snapshot/
// v3_snapshot.go, Status; Apache-2.0, The etcd Authors): bbolt's
// consistency check, then the CRC-32C of every bucket name, key and value,
// the newest revision, the number of live keys and the storage version,
// all as etcdutl computes them. One thing differs: how the kernel reads
// the file. bbolt advises its memory map MADV_RANDOM, so every page the
// walks fault in is one 4 KiB read; when the database is larger than the
// memory left to the check (a restore inside a memory cgroup) each of its
// three walks becomes hundreds of thousands of small reads. The walks go
// mostly in file order, so the map is advised MADV_NORMAL here, and the
// kernel reads around each fault.
func snapshotStatus(path string) (ds snapshot.Status, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return ds, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return ds, err
	}
	defer db.Close()
	if n := fi.Size(); n > 0 {
		// The map starts at Data and covers at least the file. Advice
		// only: on failure the walks are just slower.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, db.Info().Data, uintptr(n), unix.MADV_NORMAL)
	}

	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	seenKeys := make(map[string]struct{})
	err = db.View(func(tx *bolt.Tx) error {
		var dbErrs []string
		for dbErr := range tx.Check() {
			dbErrs = append(dbErrs, dbErr.Error())
		}
		if len(dbErrs) > 0 {
			return fmt.Errorf("snapshot file integrity check failed. %d errors found.\n%s", len(dbErrs), strings.Join(dbErrs, "\n"))
		}
		ds.TotalSize = tx.Size()
		if v := schema.ReadStorageVersionFromSnapshot(tx); v != nil {
			ds.Version = v.String()
		}
		c := tx.Cursor()
		for next, _ := c.First(); next != nil; next, _ = c.Next() {
			b := tx.Bucket(next)
			if b == nil {
				return fmt.Errorf("nil bucket: %q", string(next))
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
				return fmt.Errorf("error during bucket key iteration, name: %q err: %w", string(next), err)
			}
		}
		return nil
	})
	if err != nil {
		return ds, err
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
