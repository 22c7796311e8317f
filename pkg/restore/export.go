package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// ExportOptions configure Export.
type ExportOptions struct {
	// Backup is the backup ID to export, or "latest" (the newest full
	// backup). A delta exports the keyspace as it was at its end revision,
	// built from the newest full backup before it.
	Backup string
	// To is the snapshot file to write; it must not exist.
	To string
	// ToRevision exports the keyspace at this revision, which must lie in
	// the chain of the backup (0: the backup's own end revision).
	ToRevision int64
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
	// AllowUnauthenticated and SkipUntrusted are restore's (Options).
	AllowUnauthenticated, SkipUntrusted bool
}

// Exported is what Export wrote.
type Exported struct {
	File     string `json:"file"`
	Backup   string `json:"backup"` // the full backup it was built from
	Deltas   int    `json:"deltas"` // delta segments replayed into it
	Revision int64  `json:"revision"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"` // of the database, as appended to it
}

// ErrExportExists: the file to export to exists (Export never replaces a
// file).
var ErrExportExists = errors.New("export file exists")

// Export writes a backup as a plain etcd snapshot file: the full backup
// with the deltas of its chain replayed up to the target revision, with
// no revision bump, followed by its SHA-256, the form `etcdctl snapshot
// save` writes and `etcdutl snapshot restore` checks. The full backup and
// every delta are verified as a restore verifies them. The file is written
// 0600 and atomically (complete, or absent), and never replaces one that
// exists. The cluster may be running: only the backup store is read.
func Export(ctx context.Context, c *cluster.Cluster, o ExportOptions) (Exported, error) {
	if o.ToRevision < 0 {
		return Exported{}, fmt.Errorf("target revision %d: %w: etcd revisions start at 1", o.ToRevision, ErrBadRevision)
	}
	if o.To == "" {
		return Exported{}, errors.New("export: no file to write to")
	}
	to, err := filepath.Abs(o.To)
	if err != nil {
		return Exported{}, err
	}
	if _, err := os.Lstat(to); err == nil {
		return Exported{}, fmt.Errorf("refusing to export to %s: %w; Steward never replaces a file: remove it, or name another", to, ErrExportExists)
	}
	if fi, err := os.Stat(filepath.Dir(to)); err != nil || !fi.IsDir() {
		return Exported{}, fmt.Errorf("refusing to export to %s: its directory %s does not exist", to, filepath.Dir(to))
	}
	ro, err := exportChain(ctx, c, o)
	if err != nil {
		return Exported{}, err
	}
	src, err := openStore(ctx, c, ro, "export")
	if err != nil {
		return Exported{}, err
	}
	sd, err := scratch.New(c.Dir, "tmp-export-")
	if err != nil {
		return Exported{}, err
	}
	defer sd.Remove()
	tmp := sd.Path
	p, err := src.fetch(ctx, filepath.Join(tmp, "snapshot.db"))
	if err != nil {
		return Exported{}, err
	}
	out := Exported{File: to, Backup: p.full.ID, Deltas: p.deltas, Revision: p.revision}
	err = atomicfile.Create(to, 0o600, func(f *os.File) error {
		n, sum, werr := backup.WriteSnapshot(f, p.snapshot)
		out.Size, out.SHA256 = n, sum
		return werr
	})
	if errors.Is(err, fs.ErrExist) {
		return Exported{}, fmt.Errorf("refusing to export to %s: %w (created meanwhile); Steward never replaces a file: remove it, or name another", to, ErrExportExists)
	}
	if err != nil {
		return Exported{}, fmt.Errorf("export %s: %w", p.full.ID, err)
	}
	c.Progress.Say("exported %s at revision %d to %s (%d bytes, SHA-256 %s appended)", p.from, p.revision, to, out.Size, out.SHA256)
	return out, nil
}

// exportChain turns an export's backup and revision into restore options
// that pick its chain: a full backup up to its own revision or the target;
// a delta's chain from the newest full backup at or before the target.
func exportChain(ctx context.Context, c *cluster.Cluster, o ExportOptions) (Options, error) {
	ro := Options{Backup: o.Backup, ToRevision: o.ToRevision, KeyFile: o.KeyFile,
		AllowUnauthenticated: o.AllowUnauthenticated, SkipUntrusted: o.SkipUntrusted}
	store, err := c.BackupStore(ctx)
	if err != nil {
		return ro, err
	}
	listing, err := c.Backups(ctx, store, o.AllowUnauthenticated)
	if err != nil {
		return ro, err
	}
	m, err := listing.Find(o.Backup, store.String())
	if err != nil {
		return ro, err
	}
	if ro.ToRevision == 0 {
		ro.ToRevision = m.EndRevision
	}
	if m.Kind != backup.KindFull {
		if ro.ToRevision < m.StartRevision {
			return ro, fmt.Errorf("revision %d is before delta %s (revisions %d to %d)", ro.ToRevision, m.ID, m.StartRevision, m.EndRevision)
		}
		ro.Backup = "" // the newest full backup at or before the target
	}
	return ro, nil
}
