package datadir

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// FromSnapshotOptions name the member a data dir is built for.
type FromSnapshotOptions struct {
	// Snapshot is an etcd database file. Its appended SHA-256, if any, is
	// not checked here: callers verify what they fetched first.
	Snapshot string
	// Name and PeerURL are the member's; InitialCluster and Token those of
	// the cluster it belongs to (they fix the member and cluster IDs).
	Name, PeerURL         string
	InitialCluster, Token string
}

// FromSnapshot is the one place Steward stages a data dir from a snapshot:
// it writes a new data dir (0700) at out, which must not exist, with etcd's
// own restore. On failure it removes what it wrote at out (its own output,
// never user data) and nothing else.
func FromSnapshot(o FromSnapshotOptions, out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("stage data dir for %s: %s already exists", o.Name, out)
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: o.Snapshot, Name: o.Name, OutputDataDir: out,
		PeerURLs: []string{o.PeerURL}, InitialCluster: o.InitialCluster, InitialClusterToken: o.Token,
		SkipHashCheck: true,
	})
	if err == nil {
		err = os.Chmod(out, 0o700)
	}
	if err != nil {
		_ = os.RemoveAll(out)
		return fmt.Errorf("stage data dir for %s in %s: %w", o.Name, out, err)
	}
	return nil
}

// MoveAside renames a data dir (and its version record) to
// DIR.<why>-<timestamp>. It never deletes. It returns "" when there was
// nothing to move.
func MoveAside(dataDir, why string) (string, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(RecordPath(dataDir))
		return "", nil
	}
	dst := fmt.Sprintf("%s.%s-%s", dataDir, why, time.Now().UTC().Format("20060102T150405.000Z"))
	if err := os.Rename(dataDir, dst); err != nil {
		return "", fmt.Errorf("move data dir %s aside: %w", dataDir, err)
	}
	if err := os.Rename(RecordPath(dataDir), RecordPath(dst)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return dst, fmt.Errorf("move version record of %s aside: %w", dataDir, err)
	}
	return dst, nil
}

// RequireEmpty fails when dir exists and holds anything.
func RequireEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("data dir %s already holds data; move it away first", dir)
	}
	return nil
}
