package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/coreos/go-semver/semver"

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

// CheckVersionStep decides whether binary version next may run on a data dir
// last run by version last. etcd moves one minor at a time: skipping a minor
// upgrade is refused, and an older minor is refused unless the caller has
// gone through etcd's downgrade procedure (allowDowngrade).
func CheckVersionStep(last, next string, allowDowngrade bool) error {
	lv, err := semver.NewVersion(last)
	if err != nil {
		return fmt.Errorf("version record holds %q: %w", last, err)
	}
	nv, err := semver.NewVersion(next)
	if err != nil {
		return fmt.Errorf("version %q: %w", next, err)
	}
	switch {
	case nv.Major != lv.Major:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s is a different major version", last, next)
	case nv.Minor > lv.Minor+1:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s skips a minor version: upgrade through %d.%d first",
			last, next, lv.Major, lv.Minor+1)
	case nv.Minor < lv.Minor && !allowDowngrade:
		return fmt.Errorf("data dir was last run by etcd %s; etcd %s is an older minor version: roll back with etcd's downgrade procedure, not by swapping binaries",
			last, next)
	}
	return nil
}
