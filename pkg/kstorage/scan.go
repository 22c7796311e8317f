package kstorage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math/big"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotSnapshot is wrapped by ScanSnapshot's error for a file that is not
// an etcd snapshot database.
var ErrNotSnapshot = errors.New("not an etcd snapshot")

// DefaultPageSize is how many keys ScanLive reads per request.
const DefaultPageSize = 1000

// PageTimeout bounds each of ScanLive's requests.
const PageTimeout = time.Minute

// LiveInfo is what ScanLive read.
type LiveInfo struct {
	// Revision is the one revision every page was read at.
	Revision int64
	// Keys is the number of keys read under the prefix; Requests the number
	// of range requests it took.
	Keys, Requests int64
}

// ScanLive reads every key under the inventory's prefix from a live
// cluster, at most pageSize keys per linearizable range request
// (DefaultPageSize when 0), all at the revision of the first request so
// that the inventory is one consistent view, and adds them to inv. Memory
// holds one page.
//
// etcd (before 3.7) counts every key from a range request's start to its
// end, whatever the limit, walking its index under a read lock: paging
// with the whole remaining range as the end would cost the cluster
// O(keys²/pageSize) and stall its writes on large keyspaces. So each
// request's end is narrowed to a window expected to hold about two pages,
// estimated from the density of the keys just read (keys read as base-256
// numbers), and widened where keys are sparse. Besides the first request
// (which walks every key once), etcd walks each key a few times: in the
// windows that page through it, and once more when the scan enters its
// namespace or resource from the gap before it.
func ScanLive(ctx context.Context, kv clientv3.KV, inv *Inventory, pageSize int) (LiveInfo, error) {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	cur := inv.prefix + "/"
	final := clientv3.GetPrefixRangeEnd(cur)
	end := final // the first request's window: everything
	var info LiveInfo
	for cur < final {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(pageSize))}
		if info.Revision > 0 {
			opts = append(opts, clientv3.WithRev(info.Revision))
		}
		pctx, cancel := context.WithTimeout(ctx, PageTimeout)
		resp, err := kv.Get(pctx, cur, opts...)
		cancel()
		info.Requests++
		if errors.Is(err, rpctypes.ErrCompacted) {
			return info, fmt.Errorf("etcd compacted revision %d while it was being read (%d keys read): run the inventory again", info.Revision, info.Keys)
		}
		if err != nil {
			return info, fmt.Errorf("read keys under %s/: %w", inv.prefix, err)
		}
		if info.Revision == 0 {
			info.Revision = resp.Header.Revision
		}
		for _, p := range resp.Kvs {
			inv.Add(p.Key, p.Value)
		}
		info.Keys += int64(len(resp.Kvs))
		if resp.More && len(resp.Kvs) > 0 {
			// The window holds more: go on after the last key, in a window
			// expected to hold two pages.
			last := string(resp.Kvs[len(resp.Kvs)-1].Key)
			cur = last + "\x00"
			end = windowEnd(cur, pageWidth(resp.Kvs), end)
			continue
		}
		// The window is done: the next one starts at its end, twice as wide
		// when this one held less than half a page, 256 times (a byte)
		// when it was empty: the gap to the next namespace or resource is
		// bytes wider than the span of a page of names.
		width := new(big.Int).Sub(keyNumber(end), keyNumber(cur))
		switch {
		case len(resp.Kvs) == 0:
			width.Lsh(width, 8)
		case len(resp.Kvs) < pageSize/2:
			width.Lsh(width, 1)
		}
		cur = end
		end = windowEnd(cur, width, final)
	}
	return info, nil
}

// pageWidth estimates the width of key space that holds two pages like
// kvs: eight times the narrowest span of a quarter of the page, so that a
// gap between resources or namespaces inside the page does not count as
// density.
func pageWidth(kvs []*mvccpb.KeyValue) *big.Int {
	if len(kvs) < 8 {
		w := new(big.Int).Sub(keyNumber(string(kvs[len(kvs)-1].Key)), keyNumber(string(kvs[0].Key)))
		return w.Lsh(w, 1)
	}
	var narrowest *big.Int
	q := len(kvs) / 4
	for i := 0; i+q <= len(kvs); i += q {
		span := new(big.Int).Sub(keyNumber(string(kvs[i+q-1].Key)), keyNumber(string(kvs[i].Key)))
		if narrowest == nil || span.Cmp(narrowest) < 0 {
			narrowest = span
		}
	}
	return narrowest.Lsh(narrowest, 3)
}

// keyDigits is how many leading bytes of a key windowEnd's arithmetic
// sees; Kubernetes keys are far shorter.
const keyDigits = 1024

// keyNumber reads a key as a keyDigits-digit base-256 number (shorter keys
// padded with zero bytes).
func keyNumber(k string) *big.Int {
	var buf [keyDigits]byte
	copy(buf[:], k)
	return new(big.Int).SetBytes(buf[:])
}

// windowEnd is the key width (at least 1) above cur, and at most limit.
func windowEnd(cur string, width *big.Int, limit string) string {
	if width.Sign() <= 0 {
		width = big.NewInt(1)
	}
	n := keyNumber(cur)
	n.Add(n, width)
	if n.BitLen() > keyDigits*8 {
		return limit
	}
	var buf [keyDigits]byte
	end := string(bytes.TrimRight(n.FillBytes(buf[:]), "\x00"))
	if end >= limit || end <= cur {
		return limit
	}
	return end
}

// SnapshotInfo is what ScanSnapshot read.
type SnapshotInfo struct {
	// Revision is the newest revision in the database.
	Revision int64
	// CompactRevision is the revision of the last finished compaction (0
	// when never compacted).
	CompactRevision int64
	// Entries is the number of revisions of keys under the prefix read;
	// Keys the number of live keys among them.
	Entries, Keys int64
}

// ScanSnapshot reads an etcd backend database read-only (a snapshot from
// etcdctl snapshot save or steward backup, with or without the checksum
// etcd appends, or a stopped member's member/snap/db) and adds the newest
// version of every key under the inventory's prefix to inv; keys whose
// newest revision deletes them are not counted.
//
// The key bucket holds revisions, newest last. ScanSnapshot walks it from
// the newest back and counts each key the first time it meets it. Since a
// finished compaction leaves at most one revision per key at or below the
// compacted revision, it only has to remember the keys it met above that
// revision: memory grows with the changes since the last compaction, not
// with the number of objects (Kubernetes compacts every 5 minutes).
func ScanSnapshot(ctx context.Context, path string, inv *Inventory) (SnapshotInfo, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return SnapshotInfo{}, fmt.Errorf("snapshot file %s does not exist", path)
	}
	if err != nil {
		return SnapshotInfo{}, err
	}
	if fi.IsDir() {
		return SnapshotInfo{}, fmt.Errorf("%s is a directory, %w (for a member's data dir, give DATADIR/member/snap/db)", path, ErrNotSnapshot)
	}
	if fi.Size() == 0 {
		return SnapshotInfo{}, fmt.Errorf("%s is %w: the file is empty", path, ErrNotSnapshot)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) || strings.Contains(err.Error(), "timeout") {
			return SnapshotInfo{}, fmt.Errorf("%s is locked: is an etcd member still running on it?", path)
		}
		return SnapshotInfo{}, fmt.Errorf("%s is %w: it is not a bbolt database (%v)", path, ErrNotSnapshot, err)
	}
	defer db.Close()
	var info SnapshotInfo
	err = db.View(func(tx *bolt.Tx) error {
		kb := tx.Bucket([]byte("key"))
		if kb == nil {
			return fmt.Errorf("%s is %w: the bbolt database has no \"key\" bucket", path, ErrNotSnapshot)
		}
		if mb := tx.Bucket([]byte("meta")); mb != nil {
			if v := mb.Get([]byte("finishedCompactRev")); len(v) >= 8 {
				info.CompactRevision = int64(binary.BigEndian.Uint64(v))
			}
		}
		seen := newKeySet()
		c := kb.Cursor()
		n := 0
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if len(k) != revBytes && len(k) != revBytes+1 {
				return fmt.Errorf("%s is %w: key bucket entry %x is not a revision", path, ErrNotSnapshot, k)
			}
			rev := int64(binary.BigEndian.Uint64(k))
			if info.Revision == 0 {
				info.Revision = rev
			}
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if isRestoreMarker(k, v) {
				continue
			}
			key, value, ok := decodeKeyValue(v)
			if !ok {
				return fmt.Errorf("%s: revision %d holds a malformed key-value record", path, rev)
			}
			if !inPrefix(inv.prefix, key) {
				continue
			}
			info.Entries++
			if rev > info.CompactRevision {
				if !seen.add(key) {
					continue // a newer revision of the key was counted
				}
			} else if seen.has(key) {
				continue
			}
			if len(k) == revBytes+1 && k[revBytes] == 't' {
				continue // the key's newest revision deletes it
			}
			inv.Add(key, value)
			info.Keys++
		}
		return nil
	})
	if err != nil {
		return info, err
	}
	return info, nil
}

// isRestoreMarker says a record is the one a restore writes at the bumped
// revision (etcdutl's --bump-revision, backup.BumpRevision): an empty
// value under a put's key of sub-revision 0. It holds no key; etcd's own
// writes never leave a record empty (every KeyValue has its key), so this
// exact shape, and no other empty record, is skipped.
func isRestoreMarker(k, v []byte) bool {
	return len(v) == 0 && len(k) == revBytes && k[8] == '_' && binary.BigEndian.Uint64(k[9:]) == 0
}

// revBytes is the length of etcd's revision key: 8 bytes main revision,
// '_', 8 bytes sub revision. A deletion (tombstone) appends 't'.
const revBytes = 17

// decodeKeyValue reads the key (field 1) and value (field 5) of an
// mvccpb.KeyValue without copying them.
func decodeKeyValue(b []byte) (key, value []byte, ok bool) {
	for len(b) > 0 {
		num, typ, v, n := gogoField(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		if typ == wireBytes && num == 1 {
			key = v
		} else if typ == wireBytes && num == 5 {
			value = v
		}
	}
	return key, value, key != nil
}

// keySet remembers keys by a 128-bit fingerprint (two independent 64-bit
// hashes): 16 bytes per key, a false match about once in 2^100 sets.
type keySet struct {
	s1, s2 maphash.Seed
	m      map[[2]uint64]struct{}
}

func newKeySet() *keySet {
	return &keySet{s1: maphash.MakeSeed(), s2: maphash.MakeSeed(), m: map[[2]uint64]struct{}{}}
}

func (s *keySet) fp(k []byte) [2]uint64 {
	return [2]uint64{maphash.Bytes(s.s1, k), maphash.Bytes(s.s2, k)}
}

// add records k and reports whether it was new.
func (s *keySet) add(k []byte) bool {
	f := s.fp(k)
	if _, ok := s.m[f]; ok {
		return false
	}
	s.m[f] = struct{}{}
	return true
}

func (s *keySet) has(k []byte) bool {
	if len(s.m) == 0 {
		return false
	}
	_, ok := s.m[s.fp(k)]
	return ok
}
