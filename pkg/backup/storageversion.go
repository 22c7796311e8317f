package backup

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Where etcd keeps the versions a database was last written under
// (server/storage/schema: bucket.go, version.go, membership.go).
var (
	metaBucket        = []byte("meta")
	storageVersionKey = []byte("storageVersion")
	clusterBucket     = []byte("cluster")
	clusterVersionKey = []byte("clusterVersion")
)

// ErrStorageTooNew: a database's storage version is more than one minor
// newer than the etcd it is to run under; etcd downgrades one minor at a
// time, and so does LowerStorageVersion.
var ErrStorageTooNew = errors.New("written by a newer etcd")

// errUnchanged rolls LowerStorageVersion's transaction back when there is
// nothing to lower.
var errUnchanged = errors.New("unchanged")

// StorageVersion is what LowerStorageVersion found and did.
type StorageVersion struct {
	// From is the database's storage version as it was ("3.7.0"; "" for a
	// database etcd 3.5 wrote, which has none); To is what it is now.
	From, To string
	// Lowered says the database was changed.
	Lowered bool
}

// LowerStorageVersion makes the database at path (not opened by anyone
// else) one an etcd of minor target ("3.6") starts on, in the same bytes
// etcd's own downgrade writes (server/storage/schema, migration.go:
// UnsafeMigrate, as `etcdutl migrate --target-version` runs it): a
// storage version one minor newer than target is lowered to target's
// (3.7 -> 3.6: the schema has no changes between them, so only the
// version changes; 3.6 -> 3.5: the storageVersion field, which 3.6
// added, is removed), and the cluster version etcd 3.6 and later check
// against their own at start (membership's clusterVersion, "invalid
// downgrade" otherwise) is lowered with it, as etcd's downgrade lowers
// it. A database at or below target is left untouched (etcd upgrades it
// itself). One more than a minor newer is refused (ErrStorageTooNew) and
// nothing is written: etcd downgrades one minor at a time.
func LowerStorageVersion(path, target string) (StorageVersion, error) {
	tmaj, tmin, err := minorOf(target)
	if err != nil {
		return StorageVersion{}, fmt.Errorf("lower storage version: target %w", err)
	}
	if _, err := os.Stat(path); err != nil {
		return StorageVersion{}, fmt.Errorf("lower storage version: %w", err) // bolt.Open would create it
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return StorageVersion{}, fmt.Errorf("lower storage version: open %s: %w", path, err)
	}
	var sv StorageVersion
	err = db.Update(func(tx *bolt.Tx) error {
		mb := tx.Bucket(metaBucket)
		if mb == nil {
			return fmt.Errorf("%s is not an etcd database (no meta bucket)", path)
		}
		sv.From = string(mb.Get(storageVersionKey))
		sv.To = sv.From
		if sv.From == "" {
			return errUnchanged // written by 3.5: no storage version; any 3.5 or later opens it
		}
		maj, mi, err := minorOf(sv.From)
		if err != nil {
			return fmt.Errorf("storage version %w", err)
		}
		switch {
		case maj != tmaj:
			return fmt.Errorf("%w: its storage version %s is of another major version than etcd %s", ErrStorageTooNew, sv.From, target)
		case mi <= tmin:
			return errUnchanged
		case mi > tmin+1:
			return fmt.Errorf("%w: its storage version %s is %d minors newer than etcd %s, and etcd lowers a database's storage version one minor at a time",
				ErrStorageTooNew, sv.From, mi-tmin, target)
		}
		to := fmt.Sprintf("%d.%d.0", tmaj, tmin)
		if tmaj == 3 && tmin < 6 {
			// The field came with 3.6; etcd's downgrade to 3.5 removes it.
			if err := mb.Delete(storageVersionKey); err != nil {
				return err
			}
			sv.To = ""
		} else {
			if err := mb.Put(storageVersionKey, []byte(to)); err != nil {
				return err
			}
			sv.To = to
		}
		if cb := tx.Bucket(clusterBucket); cb != nil {
			if cv := cb.Get(clusterVersionKey); cv != nil {
				if cmaj, cmin, err := minorOf(string(cv)); err == nil && cmaj == tmaj && cmin > tmin {
					if err := cb.Put(clusterVersionKey, []byte(to)); err != nil {
						return err
					}
				}
			}
		}
		sv.Lowered = true
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, errUnchanged) {
		return sv, nil // rolled back: nothing written, not even a commit
	}
	if errors.Is(err, ErrStorageTooNew) {
		return sv, err // about the database's version, not this file
	}
	if err != nil {
		return sv, fmt.Errorf("lower storage version of %s: %w", path, err)
	}
	return sv, nil
}

// minorOf parses the major and minor of "3.7.0", "3.7" or "3.7.3".
func minorOf(v string) (int, int, error) {
	p := strings.SplitN(v, ".", 3)
	if len(p) < 2 {
		return 0, 0, fmt.Errorf("%q is not an etcd version", v)
	}
	maj, err1 := strconv.Atoi(p[0])
	mi, err2 := strconv.Atoi(p[1])
	if err1 != nil || err2 != nil || maj < 0 || mi < 0 {
		return 0, 0, fmt.Errorf("%q is not an etcd version", v)
	}
	return maj, mi, nil
}
