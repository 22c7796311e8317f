package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// recoveryJournal records a recovery (from backup, or from a survivor's own
// data) that has passed its point of no return: the seed ran with
// --force-new-cluster and holds the cluster on its own. From then on the
// seed may take writes that no backup has, so a restore from backup would
// lose them. A re-run of Recover (by the
// operator or the agent) that finds the journal resumes instead: it starts
// the seed, takes the fresh full snapshot if it is missing, and adds the
// members that are not voting members yet.
//
// Invariant: the journal exists from the moment the seed became a cluster
// of one until every other member was added and promoted.
type recoveryJournal struct {
	Seed         string    `json:"seed"`
	RestoredFrom string    `json:"restoredFrom,omitempty"` // "" for a survivor's own data
	FreshBackup  string    `json:"freshBackup,omitempty"`
	SeededAt     time.Time `json:"seededAt"`
	// Reseeding: a reseed's seed (a survivor, RestoredFrom "") is not yet
	// rebuilt above every revision served (reseed.go); a resume rebuilds
	// it first. FromTimeline is the spec's timeline before the rebuild
	// (when the spec's differs, the rebuild committed); Timeline, the one
	// the rebuild began.
	Reseeding    bool  `json:"reseeding,omitempty"`
	FromTimeline int64 `json:"fromTimeline,omitempty"`
	Timeline     int64 `json:"timeline,omitempty"`
}

// origin says where the seed's data came from, for messages.
func (j *recoveryJournal) origin() string {
	if j.RestoredFrom == "" {
		return "its own data, the newest of the survivors, rebuilt above every revision served"
	}
	return "restored from " + j.RestoredFrom + " and its deltas"
}

func recoveryJournalPath(c *cluster.Cluster) string {
	return filepath.Join(c.Dir, "status", "recovery.json")
}

// readRecoveryJournal returns nil, nil when no recovery is unfinished.
func readRecoveryJournal(c *cluster.Cluster) (*recoveryJournal, error) {
	b, err := os.ReadFile(recoveryJournalPath(c))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read recovery journal: %w", err)
	}
	var j recoveryJournal
	if err := json.Unmarshal(b, &j); err != nil || j.Seed == "" {
		return nil, refusal.New(ErrJournalUnreadable, "recovery journal %s is unreadable (%v): it records an unfinished recovery", recoveryJournalPath(c), err)
	}
	return &j, nil
}

func writeRecoveryJournal(ctx context.Context, c *cluster.Cluster, j *recoveryJournal) error {
	if err := os.MkdirAll(filepath.Dir(recoveryJournalPath(c)), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := atomicfile.WriteFile(recoveryJournalPath(c), b, 0o600); err != nil {
		return err
	}
	return copyRecoveryJournal(ctx, c, b)
}

func removeRecoveryJournal(ctx context.Context, c *cluster.Cluster) error {
	if err := os.Remove(recoveryJournalPath(c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove recovery journal: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(recoveryJournalPath(c))); err != nil {
		return err
	}
	return copyRecoveryJournal(ctx, c, nil)
}

// copyRecoveryJournal copies the journal (nil: none, the recovery
// finished) into the backup store for a coordinator that takes over
// (handover.SaveRecovery), on a multi-host cluster. A coordinator another
// took over from fails here (handover.ErrSuperseded) and goes no further;
// a store that cannot be written is a warning: the local journal still
// resumes the recovery here.
func copyRecoveryJournal(ctx context.Context, c *cluster.Cluster, b []byte) error {
	if c.Spec == nil || !c.Spec.MultiHost() {
		return nil
	}
	h, err := c.Handover(ctx)
	if err == nil {
		err = h.SaveRecovery(ctx, b)
	}
	if errors.Is(err, handover.ErrSuperseded) {
		return fmt.Errorf("refusing to go on with the recovery: %w", err)
	}
	if err != nil {
		c.Progress.Say("warning: copy the recovery journal for another coordinator: %v", err)
	}
	return nil
}
