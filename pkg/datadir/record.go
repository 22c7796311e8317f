package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// VersionRecord remembers which etcd version last ran successfully on a data
// dir, like the version file of Kubernetes' etcd migration script. It lives
// next to the data dir (DATADIR.version), not inside it, so etcd never sees
// a foreign file and moving a data dir aside moves nothing of etcd's.
type VersionRecord struct {
	Version   string    `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// RecordPath returns the version record path of a data dir.
func RecordPath(dataDir string) string { return dataDir + ".version" }

// ReadRecord reads a data dir's version record; ok is false when none exists.
func ReadRecord(dataDir string) (rec VersionRecord, ok bool, err error) {
	b, err := os.ReadFile(RecordPath(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("read version record: %w", err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, false, fmt.Errorf("version record %s is corrupt: %w", RecordPath(dataDir), err)
	}
	return rec, true, nil
}

// WriteRecord atomically writes a data dir's version record.
func WriteRecord(dataDir, version string, now time.Time) error {
	b, err := json.MarshalIndent(VersionRecord{Version: version, UpdatedAt: now.UTC()}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(RecordPath(dataDir), append(b, '\n'), 0o600)
}
