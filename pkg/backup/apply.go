package backup

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/lease/leasepb"

	"github.com/etcd-steward/steward/internal/pagecache"
)

// Chain is a full backup and the deltas that continue it without a gap.
type Chain struct {
	Full   Manifest
	Deltas []Manifest
	// End is the newest revision the chain can restore.
	End int64
	// GapAfter is set when deltas of the same cluster exist after a gap
	// that follows End and no newer full backup covers it.
	GapAfter []Manifest
}

// BuildChain picks, from every manifest of a store, the deltas that continue
// full. Deltas of other clusters and of other timelines are ignored; overlapping deltas (a backup
// leader handover) are trimmed, not an error.
func BuildChain(all []Manifest, full Manifest) Chain {
	var ds []Manifest
	newerFull := int64(0)
	for _, m := range all {
		if m.TimelineID() != full.TimelineID() {
			continue // a chain never mixes timelines
		}
		switch {
		case m.Kind == KindDelta && m.ClusterID == full.ClusterID && m.EndRevision > full.EndRevision:
			ds = append(ds, m)
		case m.Kind == KindFull && m.ClusterID == full.ClusterID && m.EndRevision > full.EndRevision:
			if newerFull == 0 || m.EndRevision < newerFull {
				newerFull = m.EndRevision
			}
		}
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].StartRevision != ds[j].StartRevision {
			return ds[i].StartRevision < ds[j].StartRevision
		}
		return ds[i].EndRevision > ds[j].EndRevision
	})
	c := Chain{Full: full, End: full.EndRevision}
	for i, d := range ds {
		if d.EndRevision <= c.End {
			continue // covered already
		}
		if d.StartRevision > c.End+1 {
			if newerFull == 0 || newerFull > d.StartRevision {
				c.GapAfter = ds[i:]
			}
			break
		}
		c.Deltas = append(c.Deltas, d)
		c.End = d.EndRevision
	}
	return c
}

// ApplyOptions bound what Apply replays.
type ApplyOptions struct {
	// ToRevision stops after this revision (0: all).
	ToRevision int64
	// ToTime stops before events received after this time (zero: all).
	ToTime time.Time
}

// Apply replays delta segments into a snapshot database file (without
// etcd's appended checksum), writing each event straight into etcd's
// key bucket at its original revision, so restored keys keep their create
// and mod revisions and versions, and each lease into the lease bucket with
// its TTL. It reads every segment to its end to check its SHA-256, also
// past the stopping point. It returns the last revision applied.
func Apply(ctx context.Context, s Store, key *Key, dbPath string, from int64, deltas []Manifest, o ApplyOptions) (int64, error) {
	// Opening a database etcd wrote (it does not sync its freelist) walks
	// every page; read ahead of the walk (bbolt's own faults are 4 KiB).
	stop := pagecache.Prefetch(dbPath)
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: time.Second, NoSync: true})
	stop()
	if err != nil {
		return 0, fmt.Errorf("open snapshot database: %w", err)
	}
	defer db.Close()
	last, lastSub := from, int64(-1)
	stopped := false
	tx, err := db.Begin(true)
	if err != nil {
		return 0, err
	}
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	kb, lb := tx.Bucket([]byte("key")), tx.Bucket([]byte("lease"))
	if kb == nil || lb == nil {
		return 0, fmt.Errorf("snapshot database has no key or lease bucket: not an etcd v3 snapshot")
	}
	pending := 0
	commit := func() error {
		if err := tx.Commit(); err != nil {
			return err
		}
		if tx, err = db.Begin(true); err != nil {
			return err
		}
		kb, lb = tx.Bucket([]byte("key")), tx.Bucket([]byte("lease"))
		pending = 0
		return nil
	}
	revKey := make([]byte, 17)
	for _, d := range deltas {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		r, finish, closeFn, err := openObject(ctx, s, d, key, filepath.Dir(dbPath))
		if err != nil {
			return 0, err
		}
		dr, err := NewDeltaReader(r)
		if err != nil {
			closeFn()
			return 0, fmt.Errorf("delta %s is corrupt: %w", d.ID, err)
		}
		first, lastEv := int64(0), int64(0)
		for {
			rec, err := dr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				closeFn()
				return 0, fmt.Errorf("delta %s is corrupt: %w", d.ID, err)
			}
			if rec.Type == 'P' || rec.Type == 'D' {
				if first == 0 {
					first = rec.KV.ModRevision
				}
				lastEv = rec.KV.ModRevision
			}
			if stopped {
				continue
			}
			switch rec.Type {
			case 'T':
				if !o.ToTime.IsZero() && rec.Time.After(o.ToTime) {
					stopped = true
				}
			case 'L':
				lb2, _ := (&leasepb.Lease{ID: rec.LeaseID, TTL: rec.TTL}).Marshal()
				var id [8]byte
				binary.BigEndian.PutUint64(id[:], uint64(rec.LeaseID))
				if err := lb.Put(id[:], lb2); err != nil {
					closeFn()
					return 0, err
				}
			case 'P', 'D':
				rev := rec.KV.ModRevision
				if rev < last || rev == last && rec.Sub <= lastSub {
					continue // overlap with what is applied already
				}
				if o.ToRevision > 0 && rev > o.ToRevision {
					stopped = true
					continue
				}
				if !(rev == last && rec.Sub == lastSub+1) && !(rev == last+1 && rec.Sub == 0) {
					closeFn()
					return 0, fmt.Errorf("delta %s: event %d.%d does not follow revision %d.%d: the delta chain has a gap", d.ID, rev, rec.Sub, last, lastSub)
				}
				putRevKey(revKey, rev, rec.Sub)
				k := revKey
				if rec.Type == 'D' {
					k = append(revKey[:17:17], 't')
				}
				v, err := rec.KV.Marshal()
				if err != nil {
					closeFn()
					return 0, err
				}
				if err := kb.Put(append([]byte(nil), k...), v); err != nil {
					closeFn()
					return 0, err
				}
				last, lastSub = rev, rec.Sub
				if pending++; pending >= 20000 {
					if err := commit(); err != nil {
						closeFn()
						return 0, err
					}
				}
			}
		}
		err = finish()
		closeFn()
		if err != nil {
			return 0, err
		}
		// The manifest's range is what the chain was built from: a segment
		// holding other revisions would drop or invent history.
		if first != d.StartRevision || lastEv != d.EndRevision {
			return 0, fmt.Errorf("delta %s holds revisions %d to %d, but its manifest says %d to %d: refusing to restore from it", d.ID, first, lastEv, d.StartRevision, d.EndRevision)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	tx = nil
	if err := db.Sync(); err != nil {
		return 0, err
	}
	return last, nil
}

// VerifyDelta reads a delta segment to its end: size, SHA-256, key,
// decompression, record format, and that events follow each other revision
// by revision from the manifest's start to its end.
func VerifyDelta(ctx context.Context, s Store, m Manifest, key *Key, tmpDir string) error {
	r, finish, closeFn, err := openObject(ctx, s, m, key, tmpDir)
	if err != nil {
		return err
	}
	defer closeFn()
	dr, err := NewDeltaReader(r)
	if err != nil {
		return fmt.Errorf("delta %s is corrupt: %w", m.ID, err)
	}
	first, last := int64(0), int64(0)
	for {
		rec, err := dr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("delta %s is corrupt: %w", m.ID, err)
		}
		if rec.Type == 'P' || rec.Type == 'D' {
			if first == 0 {
				first = rec.KV.ModRevision
			}
			last = rec.KV.ModRevision
		}
	}
	if err := finish(); err != nil {
		return err
	}
	if first != m.StartRevision || last != m.EndRevision {
		return fmt.Errorf("delta %s holds revisions %d to %d, manifest says %d to %d", m.ID, first, last, m.StartRevision, m.EndRevision)
	}
	return nil
}
