package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/etcd-steward/steward/internal/filelock"
)

// DBName is the plan database's file name in the Steward directory.
const DBName = "plans.db"

var (
	bucketPlans = []byte("plans")
	bucketMeta  = []byte("meta")
	keyLatest   = []byte("latest")
)

// ErrNoPlan is returned when the Steward directory holds no plan.
var ErrNoPlan = errors.New("no upgrade or rollback plan in this Steward directory")

// Store keeps plans in a bbolt database. The database is opened for each
// operation and closed after it, so `steward plan show` can read while
// another process runs a plan. bbolt syncs every committed transaction to
// disk before Update returns.
type Store struct {
	dir string
	// Mirror, when set, is called after each Save with Save's ctx and the
	// saved plan, and its error fails the Save: a coordinator of a
	// multi-host cluster keeps a copy where another can take over
	// (package handover), and one that was superseded stops there, before
	// a step acts.
	Mirror func(context.Context, *Plan) error
}

// OpenStore returns the plan store of a Steward directory.
func OpenStore(dir string) *Store { return &Store{dir: dir} }

// Path is the database file.
func (s *Store) Path() string { return filepath.Join(s.dir, DBName) }

func (s *Store) db(readOnly bool) (*bolt.DB, error) {
	if readOnly {
		if _, err := os.Stat(s.Path()); errors.Is(err, os.ErrNotExist) {
			return nil, ErrNoPlan
		}
	}
	db, err := bolt.Open(s.Path(), 0o600, &bolt.Options{Timeout: 30 * time.Second, ReadOnly: readOnly})
	if err != nil {
		return nil, fmt.Errorf("open plan database %s: %w", s.Path(), err)
	}
	return db, nil
}

// Save writes a plan and makes it the latest; it returns after the write
// is on disk. An abort request is sticky: once another process recorded
// one, saving a copy without it keeps it. The local write does not depend
// on ctx (a failed step is recorded after the caller gave up); the Mirror
// gets ctx.
func (s *Store) Save(ctx context.Context, p *Plan) error {
	p.UpdatedAt = time.Now().UTC()
	db, err := s.db(false)
	if err != nil {
		return err
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		pb, err := tx.CreateBucketIfNotExists(bucketPlans)
		if err != nil {
			return err
		}
		mb, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if old, err := get(tx, p.ID); err == nil && old.AbortRequested {
			p.AbortRequested = true
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if err := pb.Put([]byte(p.ID), b); err != nil {
			return err
		}
		return mb.Put(keyLatest, []byte(p.ID))
	})
	if err != nil {
		return fmt.Errorf("save plan %s: %w", p.ID, err)
	}
	if s.Mirror != nil {
		if err := s.Mirror(ctx, p); err != nil {
			return fmt.Errorf("save plan %s: the copy for another coordinator: %w", p.ID, err)
		}
	}
	return nil
}

// Get loads a plan by ID.
func (s *Store) Get(id string) (*Plan, error) {
	var p *Plan
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		p, err = get(tx, id)
		return err
	})
	return p, err
}

// Latest loads the most recently saved plan.
func (s *Store) Latest() (*Plan, error) {
	var p *Plan
	err := s.view(func(tx *bolt.Tx) error {
		mb := tx.Bucket(bucketMeta)
		if mb == nil || mb.Get(keyLatest) == nil {
			return ErrNoPlan
		}
		var err error
		p, err = get(tx, string(mb.Get(keyLatest)))
		return err
	})
	return p, err
}

// List returns every plan, oldest first.
func (s *Store) List() ([]*Plan, error) {
	var out []*Plan
	err := s.view(func(tx *bolt.Tx) error {
		pb := tx.Bucket(bucketPlans)
		if pb == nil {
			return nil
		}
		return pb.ForEach(func(k, v []byte) error {
			p, err := Parse(v)
			if err != nil {
				return fmt.Errorf("plan %s: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	if errors.Is(err, ErrNoPlan) {
		err = nil
	}
	return out, err
}

func (s *Store) view(f func(*bolt.Tx) error) error {
	db, err := s.db(true)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(f)
}

func get(tx *bolt.Tx, id string) (*Plan, error) {
	pb := tx.Bucket(bucketPlans)
	if pb == nil {
		return nil, ErrNoPlan
	}
	b := pb.Get([]byte(id))
	if b == nil {
		return nil, fmt.Errorf("no plan %q", id)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", id, err)
	}
	return p, nil
}

// Lock is held by the one process that runs a plan.
type Lock struct{ l *filelock.Lock }

// ErrLocked is returned by TryLock when another process runs a plan.
var ErrLocked = errors.New("another steward process is running a plan in this Steward directory")

// TryLock takes the plan runner's lock without waiting.
func (s *Store) TryLock() (*Lock, error) {
	l, err := filelock.TryLock(filepath.Join(s.dir, "run", "plan.lock"))
	if errors.Is(err, filelock.ErrHeld) {
		return nil, ErrLocked
	}
	if err != nil {
		return nil, fmt.Errorf("plan lock: %w", err)
	}
	return &Lock{l: l}, nil
}

// Locked reports whether a process holds the runner's lock now.
func (s *Store) Locked() bool {
	l, err := s.TryLock()
	if err != nil {
		return errors.Is(err, ErrLocked)
	}
	l.Release()
	return false
}

// Release gives the lock up.
func (l *Lock) Release() { l.l.Release() }
