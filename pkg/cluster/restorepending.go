package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// RestorePendingFile is the marker, under DIR/status, that a restore's
// commit (pkg/restore) writes before it moves the first member's data dir
// aside and removes only after the spec names the restored timeline.
//
// Invariant: while it exists, some members may hold restored data dirs
// (fresh raft logs, term 1) and others their old ones, of the same cluster
// ID and member IDs; started together, an old member would win an election
// and overwrite the restored ones. So nothing starts a member while it
// exists (RequireNoRestorePending, called by bootstrap.Up and
// recovery.Run); a new restore with force finishes the commit and removes
// it.
const RestorePendingFile = "restore-pending.json"

// ErrRestoreInterrupted: a restore stopped in the middle of its commit
// (RestorePendingFile exists); members must not start until a restore
// is run again and finishes.
var ErrRestoreInterrupted = errors.New("a restore stopped in the middle of its commit")

// RestorePending is what RestorePendingFile holds. JSON field names are
// stable.
type RestorePending struct {
	// Timeline is the timeline the interrupted restore began.
	Timeline int64 `json:"timeline"`
	// Members are the members whose data dirs it was putting in place.
	Members   []string  `json:"members"`
	StartedAt time.Time `json:"startedAt"`
}

// RestorePendingPath is the marker file of directory dir.
func RestorePendingPath(dir string) string {
	return filepath.Join(dir, "status", RestorePendingFile)
}

// ReadRestorePending returns the marker, nil when there is none. A marker
// that cannot be parsed is still a marker: it returns one with no fields
// set rather than an error, so a torn or damaged file never lets members
// start.
func ReadRestorePending(dir string) (*RestorePending, error) {
	b, err := os.ReadFile(RestorePendingPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p RestorePending
	if json.Unmarshal(b, &p) != nil {
		return &RestorePending{}, nil
	}
	return &p, nil
}

// WriteRestorePending records p atomically (0600, in a 0700 directory).
func WriteRestorePending(dir string, p RestorePending) error {
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(RestorePendingPath(dir), append(b, '\n'), 0o600)
}

// RemoveRestorePending removes the marker (none is not an error).
func RemoveRestorePending(dir string) error {
	err := os.Remove(RestorePendingPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Join(dir, "status"))
}

// RequireNoRestorePending refuses (ErrRestoreInterrupted) while the marker
// of an interrupted restore commit exists; what names the action refused.
func RequireNoRestorePending(dir, what string) error {
	p, err := ReadRestorePending(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", RestorePendingPath(dir), err)
	}
	if p == nil {
		return nil
	}
	return refusal.New(ErrRestoreInterrupted, "refusing to %s: %s", what, p.describe(RestorePendingPath(dir)))
}

func (p *RestorePending) describe(path string) string {
	if p.Timeline == 0 {
		return fmt.Sprintf("a restore stopped in the middle of its commit (%s, unreadable): some members may hold restored data dirs and others their old ones, and started together the old ones would overwrite the restored; the restore must be run again to finish it", path)
	}
	return fmt.Sprintf("a restore to timeline %d, started %s, stopped while putting the restored data dirs of %s in place (%s): some members may hold restored data dirs and others their old ones, and started together the old ones would overwrite the restored; the restore must be run again to finish it",
		p.Timeline, p.StartedAt.UTC().Format(time.RFC3339), strings.Join(p.Members, ", "), path)
}
