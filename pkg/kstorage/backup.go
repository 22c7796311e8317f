package kstorage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// BackupSnapshot is a full backup fetched into a private temporary
// directory, with the delta segments that continue it replayed, ready for
// ScanSnapshot. Remove deletes it.
type BackupSnapshot struct {
	// Path is the snapshot database (mode 0600, in a 0700 directory).
	Path string
	// Full is the full backup's manifest.
	Full backup.Manifest
	// Deltas is the number of delta segments replayed; Revision the
	// revision reached (Full.EndRevision when none).
	Deltas   int
	Revision int64
	// Notes say what the snapshot does not hold.
	Notes []string
	dir   *scratch.Dir
}

// Remove deletes the fetched snapshot and its directory.
func (b *BackupSnapshot) Remove() error {
	if b == nil || b.dir == nil {
		return nil
	}
	return b.dir.Remove()
}

// Refusals of FetchBackup, for the command to say how to list the backups.
var (
	// ErrNoBackup: no backup of the ID asked for.
	ErrNoBackup = errors.New("no such backup")
	// ErrNotFull: the backup asked for is a delta segment.
	ErrNotFull = errors.New("not a full backup")
)

// FetchBackup fetches the full backup id (among the manifests lo trusts) ("latest" or "" for the newest)
// from store into a new directory under tmpParent, verifying it as
// `steward backup verify` does (size, SHA-256, key, etcd's checksum,
// consistency, revision), then replays the delta segments that continue it
// without a gap, as `steward restore` does: the result is the keyspace at
// the newest backed-up revision of that chain. Nothing but the temporary
// directory is written; on error it is removed.
func FetchBackup(ctx context.Context, store backup.Store, key *backup.Key, lo backup.ListOptions, id, tmpParent string) (*BackupSnapshot, error) {
	listing, err := backup.List(ctx, store, lo)
	if err != nil {
		return nil, err
	}
	all := listing.Backups
	var full backup.Manifest
	found := false
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if ((id == "" || id == "latest") && m.Kind == backup.KindFull) || m.ID == id {
			full, found = m, true
			break
		}
	}
	switch {
	case !found && (id == "" || id == "latest"):
		return nil, fmt.Errorf("%w in %s", backup.ErrNoFullBackup, store)
	case !found:
		return nil, refusal.New(ErrNoBackup, "no backup %q in %s", id, store)
	case full.Kind != backup.KindFull:
		return nil, refusal.New(ErrNotFull, "backup %s is a %s segment: name a full backup (the deltas after it are replayed)", full.ID, full.Kind)
	}
	dir, err := scratch.New(tmpParent, "tmp-inventory-")
	if err != nil {
		return nil, err
	}
	b := &BackupSnapshot{Path: filepath.Join(dir.Path, "snapshot.db"), Full: full, Revision: full.EndRevision, dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = b.Remove()
		}
	}()
	if err := backup.FetchDatabase(ctx, store, full, key, b.Path); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	chain := backup.BuildChain(all, full)
	if len(chain.Deltas) > 0 {
		rev, err := backup.Apply(ctx, store, key, b.Path, full.EndRevision, chain.Deltas, backup.ApplyOptions{})
		if err != nil {
			return nil, err
		}
		b.Deltas, b.Revision = len(chain.Deltas), rev
	}
	if len(chain.GapAfter) > 0 {
		b.Notes = append(b.Notes, fmt.Sprintf("the delta chain after %s stops at revision %d: %d delta segments after a gap (from revision %d) are not included",
			full.ID, chain.End, len(chain.GapAfter), chain.GapAfter[0].StartRevision))
	}
	ok = true
	return b, nil
}
