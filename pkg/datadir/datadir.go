// Package datadir inspects an etcd data dir without starting etcd: is it
// empty, does it hold the WAL and snapshot files etcd needs, does its
// database open, and at which revision would etcd resume. The agent checks
// every data dir before it starts a member; recovery uses the same check to
// decide between restarting members and restoring from backup.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
)

// States of a data dir.
const (
	Empty   = "Empty"
	Valid   = "Valid"
	Invalid = "Invalid"
)

// Finding is what Check found.
type Finding struct {
	DataDir  string `json:"dataDir"`
	State    string `json:"state"`
	Revision int64  `json:"revision,omitempty"`
	Problem  string `json:"problem,omitempty"`
	// MemberID and ClusterID are the IDs the WAL's metadata records (hex,
	// as etcd prints them), when it has one that reads: what a restore
	// keeps (an agent before them leaves them out).
	MemberID  string `json:"memberID,omitempty"`
	ClusterID string `json:"clusterID,omitempty"`
}

func (f Finding) String() string {
	switch f.State {
	case Valid:
		return fmt.Sprintf("data dir %s: valid, revision %d", f.DataDir, f.Revision)
	case Empty:
		return fmt.Sprintf("data dir %s: empty", f.DataDir)
	}
	return fmt.Sprintf("data dir %s: invalid: %s", f.DataDir, f.Problem)
}

// Check inspects a data dir. The member must not be running (etcd locks its
// database).
func Check(dataDir string) Finding {
	f := Finding{DataDir: dataDir}
	member := filepath.Join(dataDir, "member")
	if _, err := os.Stat(member); errors.Is(err, os.ErrNotExist) {
		f.State = Empty
		return f
	}
	wals, _ := filepath.Glob(filepath.Join(member, "wal", "*.wal"))
	if len(wals) == 0 {
		return invalid(f, "no WAL files in member/wal")
	}
	db := filepath.Join(member, "snap", "db")
	fi, err := os.Stat(db)
	if err != nil {
		return invalid(f, "no database member/snap/db")
	}
	if fi.Size() == 0 {
		return invalid(f, "database member/snap/db is empty")
	}
	if id, cid, err := MemberID(filepath.Join(member, "wal")); err == nil {
		f.MemberID, f.ClusterID = types.ID(id).String(), types.ID(cid).String()
	}
	rev, err := Revision(db)
	if err != nil {
		return invalid(f, err.Error())
	}
	f.State, f.Revision = Valid, rev
	return f
}

// DiscardFailedBootstrap removes the member dir that an etcd which never
// got past its bootstrap left in dataDir, and reports whether it did.
//
// etcd creates DATA/member, and its database in member/snap, before it
// asks its peers for the cluster (joining) or checks its flags against
// them; if that fails it exits, and the dir it leaves would make every
// later start fail Check ("no WAL files"). Removing it loses nothing only
// under two conditions, which the caller must hold: the data dir was
// Empty when that process started (so everything in member/ is that
// process's), and the process has exited. Two more are checked here.
// The data dir has no version record: one is written when a member first
// answers as ready, so a member that ever served (and may since have lost
// its WAL files to a disk fault or a hand) keeps its database, the best
// copy a recovery could have. And member/wal holds no WAL file. etcd
// writes its WAL (wal.Create, through member/wal.tmp renamed into place)
// before raft runs, so without one it recorded no entry and received no
// snapshot: whatever member/ holds is also on the peers, or was never
// anywhere.
func DiscardFailedBootstrap(dataDir string) (bool, error) {
	member := filepath.Join(dataDir, "member")
	if _, err := os.Stat(member); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if _, served, err := ReadRecord(dataDir); err != nil || served {
		return false, err
	}
	wals, err := filepath.Glob(filepath.Join(member, "wal", "*.wal"))
	if err != nil || len(wals) > 0 {
		return false, err
	}
	if err := os.RemoveAll(member); err != nil {
		return false, fmt.Errorf("remove %s, left by a member that failed its bootstrap: %w", member, err)
	}
	return true, nil
}

func invalid(f Finding, p string) Finding {
	f.State, f.Problem = Invalid, p
	return f
}

// Revision opens an etcd database read-only and returns the revision etcd
// would resume at: the newest in the key bucket, never below the compacted
// one, never below 1.
func Revision(path string) (int64, error) {
	rev, _, err := Revisions(path)
	return rev, err
}

// Revisions returns, from one read-only open of an etcd database, the
// revision etcd would resume at (as Revision) and the compacted revision.
func Revisions(path string) (rev, compacted int64, err error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		if strings.Contains(err.Error(), "timeout") {
			return 0, 0, errors.New("database is locked: is the member still running?")
		}
		return 0, 0, fmt.Errorf("database does not open: %v", err)
	}
	defer db.Close()
	var last int64
	err = db.View(func(tx *bolt.Tx) error {
		kb := tx.Bucket([]byte("key"))
		if kb == nil {
			return errors.New("database has no key bucket")
		}
		if k, _ := kb.Cursor().Last(); len(k) >= 8 {
			last = int64(be(k))
		}
		if mb := tx.Bucket([]byte("meta")); mb != nil {
			if v := mb.Get([]byte("finishedCompactRev")); len(v) >= 8 {
				compacted = int64(be(v))
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return max(last, compacted, 1), compacted, nil
}

func be(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}
