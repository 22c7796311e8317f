package datadir

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

// Applied compares what a stopped member's database holds with what its
// WAL committed: applied is the database's consistent index, committed the
// commit index of the WAL's last hard state. etcd acknowledges a write only
// after applying it, but a member stopped between commit and apply holds
// committed entries in its WAL only (they are applied at its next start):
// its database alone is complete only when applied >= committed.
func Applied(dataDir string) (applied, committed uint64, err error) {
	member := filepath.Join(dataDir, "member")
	db, err := bolt.Open(filepath.Join(member, "snap", "db"), 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return 0, 0, fmt.Errorf("open database of %s: %w", dataDir, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		mb := tx.Bucket([]byte("meta"))
		if mb == nil {
			return errors.New("database has no meta bucket")
		}
		v := mb.Get([]byte("consistent_index"))
		if len(v) < 8 {
			return errors.New("database has no consistent index")
		}
		applied = be(v)
		return nil
	})
	db.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("database of %s: %w", dataDir, err)
	}
	walDir := filepath.Join(member, "wal")
	lg := zap.NewNop()
	snaps, err := wal.ValidSnapshotEntries(lg, walDir)
	if err != nil {
		return 0, 0, fmt.Errorf("read WAL of %s: %w", dataDir, err)
	}
	if len(snaps) == 0 {
		return 0, 0, fmt.Errorf("WAL of %s holds no snapshot record", dataDir)
	}
	hs, err := wal.Verify(lg, walDir, snaps[len(snaps)-1])
	if err != nil {
		return 0, 0, fmt.Errorf("read WAL of %s: %w", dataDir, err)
	}
	return applied, hs.Commit, nil
}
