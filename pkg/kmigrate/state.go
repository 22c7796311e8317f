package kmigrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// StateFile is the migration state database's file name in the Steward
// directory.
const StateFile = "migrate.db"

var (
	bucketResources = []byte("resources")
	bucketFailures  = []byte("failures")
)

// ErrStateLocked is returned when another process has the state database
// open for a migration.
var ErrStateLocked = errors.New("another storage migration is running with this Steward directory")

// ResourceState is what the state database records for one resource.
type ResourceState struct {
	// Resource is kubectl's name of the resource: configmaps,
	// deployments.apps, widgets.example.com.
	Resource string `json:"resource"`
	// Run is the migration in progress, or the last one finished.
	Run *RunState `json:"run,omitempty"`
	// MigratedHash is the storageVersionHash the resource had when a
	// migration last finished with no failed object; --auto migrates the
	// resource again only when discovery shows another hash.
	MigratedHash string `json:"migratedHash,omitempty"`
	// MigratedAt is when that migration finished.
	MigratedAt time.Time `json:"migratedAt,omitzero"`
}

// RunState is one migration of a resource, saved after each chunk so that
// a killed run resumes where it stopped.
type RunState struct {
	// StorageVersionHash is the hash discovery showed when the run started;
	// a run is resumed only while the hash is unchanged.
	StorageVersionHash string `json:"storageVersionHash,omitempty"`
	// Version is the API version the requests use.
	Version string `json:"version"`
	// StartedAt, UpdatedAt and FinishedAt (zero until done) are times of
	// the run.
	StartedAt  time.Time `json:"startedAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Continue is the continue token of the next chunk to list; empty
	// before the first chunk and after the last.
	Continue string `json:"continue,omitempty"`
	// LastKey is the key (NAMESPACE/NAME, or NAME when cluster-scoped) of
	// the last object of the last chunk done.
	LastKey string `json:"lastKey,omitempty"`
	// Chunks is the number of chunks done.
	Chunks int64 `json:"chunks"`
	// Migrated, Skipped and Failed count the objects rewritten, found gone
	// (404) and refused so far.
	Migrated int64 `json:"migrated"`
	Skipped  int64 `json:"skipped"`
	Failed   int64 `json:"failed"`
	// ListRestarts counts the continue tokens that had expired (410 Gone).
	ListRestarts int64 `json:"listRestarts,omitempty"`
	// Done is true once the last chunk is done.
	Done bool `json:"done"`
}

// Processed is the number of objects dealt with so far.
func (r *RunState) Processed() int64 { return r.Migrated + r.Skipped + r.Failed }

// Failure is an object the API server refused to rewrite.
type Failure struct {
	// Namespace is empty for cluster-scoped objects.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Code is the HTTP status code of the refusal (422, 403, ...).
	Code int `json:"code"`
	// Reason is the API server's message.
	Reason string `json:"reason"`
}

// Key is the failed object's key: NAMESPACE/NAME, or NAME.
func (f Failure) Key() string { return objectKey(f.Namespace, f.Name) }

// State is the migration state database, DIR/migrate.db (bbolt). Every
// write is one transaction that bbolt syncs to disk before returning.
// The database is held open, and locked, by one process at a time.
type State struct {
	db *bolt.DB
}

// StatePath returns the state database of a Steward directory.
func StatePath(dir string) string { return filepath.Join(dir, StateFile) }

// OpenState opens (creating it and the directory when missing) the state
// database of a Steward directory for writing. It fails with
// ErrStateLocked when another process holds it.
func OpenState(dir string) (*State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("steward dir: %w", err)
	}
	return openState(StatePath(dir), false)
}

// ReadState returns every resource's state from the state database of a
// Steward directory, read-only; an empty map when there is no database.
func ReadState(dir string) (map[string]ResourceState, error) {
	p := StatePath(dir)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return map[string]ResourceState{}, nil
	}
	s, err := openState(p, true)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.All()
}

func openState(path string, readOnly bool) (*State, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: readOnly})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%s: %w", path, ErrStateLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open migration state %s: %w", path, err)
	}
	if !readOnly {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketResources, bucketFailures} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("init migration state %s: %w", path, err)
		}
	}
	return &State{db: db}, nil
}

// Path is the database file.
func (s *State) Path() string { return s.db.Path() }

// Close closes the database.
func (s *State) Close() error { return s.db.Close() }

// Get returns a resource's state; ok is false when none is recorded.
func (s *State) Get(resource string) (rs ResourceState, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResources)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(resource))
		if v == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(v, &rs)
	})
	if err != nil {
		return ResourceState{}, false, fmt.Errorf("migration state of %s: %w", resource, err)
	}
	return rs, ok, nil
}

// All returns every resource's state.
func (s *State) All() (map[string]ResourceState, error) {
	out := map[string]ResourceState{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketResources)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var rs ResourceState
			if err := json.Unmarshal(v, &rs); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			out[string(k)] = rs
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("migration state: %w", err)
	}
	return out, nil
}

// Save records a resource's state and adds failures to its failure list,
// in one transaction; it returns once that is on disk. It sets
// rs.Run.UpdatedAt to the current time. With reset, the
// resource's earlier failures are dropped first (a new run starts).
func (s *State) Save(rs ResourceState, failures []Failure, reset bool) error {
	if rs.Run != nil {
		rs.Run.UpdatedAt = time.Now().UTC()
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		v, err := json.Marshal(rs)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketResources).Put([]byte(rs.Resource), v); err != nil {
			return err
		}
		fb := tx.Bucket(bucketFailures)
		if reset && fb.Bucket([]byte(rs.Resource)) != nil {
			if err := fb.DeleteBucket([]byte(rs.Resource)); err != nil {
				return err
			}
		}
		if len(failures) == 0 {
			return nil
		}
		rb, err := fb.CreateBucketIfNotExists([]byte(rs.Resource))
		if err != nil {
			return err
		}
		for _, f := range failures {
			v, err := json.Marshal(f)
			if err != nil {
				return err
			}
			if err := rb.Put([]byte(f.Key()), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save migration state of %s: %w", rs.Resource, err)
	}
	return nil
}

// Failures returns up to limit (all when limit <= 0) of a resource's
// recorded failures, in key order.
func (s *State) Failures(resource string, limit int) ([]Failure, error) {
	out := []Failure{}
	err := s.db.View(func(tx *bolt.Tx) error {
		fb := tx.Bucket(bucketFailures)
		if fb == nil {
			return nil
		}
		rb := fb.Bucket([]byte(resource))
		if rb == nil {
			return nil
		}
		c := rb.Cursor()
		for k, v := c.First(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var f Failure
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			out = append(out, f)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failures of %s: %w", resource, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
}
