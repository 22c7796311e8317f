package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// StatusDir is DIR/status: the files that record what was seen of the
// cluster (its ID here; conditions, loop reports, renewal and recovery
// states written by the packages that own them).
func (c *Cluster) StatusDir() string { return filepath.Join(c.Dir, "status") }

// clusterIDPath records the etcd cluster ID last seen for this spec, so a
// restore can refuse a backup of another cluster.
func (c *Cluster) clusterIDPath() string { return filepath.Join(c.StatusDir(), "cluster-id") }

// RecordClusterID records the etcd cluster ID of this spec's cluster (when
// it differs from the one recorded). Commands that see the live cluster
// call it: up once the cluster is healthy, status, a full backup.
func (c *Cluster) RecordClusterID(id string) error {
	if known, err := c.KnownClusterID(); err == nil && known == id {
		return nil
	}
	if err := os.MkdirAll(c.StatusDir(), 0o700); err != nil {
		return fmt.Errorf("record the cluster ID: %w", err)
	}
	if err := atomicfile.WriteFile(c.clusterIDPath(), []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the cluster ID: %w", err)
	}
	return nil
}

// KnownClusterID returns the cluster ID last recorded, or "" when none was.
func (c *Cluster) KnownClusterID() (string, error) {
	b, err := os.ReadFile(c.clusterIDPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the recorded cluster ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
