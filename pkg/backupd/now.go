package backupd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/status"
)

// ErrNoLeader refuses a backup from "the leader" while there is none
// (Options.Member names another source).
var ErrNoLeader = errors.New("no leader to back up from")

// Options configure Now.
type Options struct {
	// Member to stream from (default: the leader).
	Member string
	// KeyFile overrides the spec's encryption key file.
	KeyFile string
}

// Now takes a verified full snapshot from a healthy member (the leader
// by default) and stores it with its manifest.
func Now(ctx context.Context, c *cluster.Cluster, o Options) (backup.Manifest, error) {
	st, err := status.LiveMembers(ctx, c)
	if err != nil {
		return backup.Manifest{}, err
	}
	name := o.Member
	if name == "" {
		if st.Cluster.Leader == "" {
			return backup.Manifest{}, refusal.New(ErrNoLeader, "refusing to back up: the cluster has no leader (%s)", st.Unhealthy())
		}
		name = st.Cluster.Leader
	}
	if _, err := c.Member(name); err != nil {
		return backup.Manifest{}, err
	}
	m, _ := st.Member(name)
	if !m.Healthy {
		return backup.Manifest{}, fmt.Errorf("refusing to back up from %s: it is not healthy (%s)", name, m.LastError)
	}
	key, err := c.BackupKey(o.KeyFile)
	if err != nil {
		return backup.Manifest{}, err
	}
	auth, err := c.BackupAuthKey()
	if err != nil {
		return backup.Manifest{}, err
	}
	store, err := c.BackupStore(ctx)
	if err != nil {
		return backup.Manifest{}, err
	}
	cli, err := c.Client(m.ClientURLs...)
	if err != nil {
		return backup.Manifest{}, err
	}
	defer cli.Close()
	tmp := filepath.Join(c.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return backup.Manifest{}, err
	}
	c.Progress.Say("streaming a snapshot from %s (db %s)", name, progress.Bytes(m.DBSize))
	man, err := backup.TakeFull(ctx, cli, store, backup.FullOptions{
		Member: name, ClusterID: st.Cluster.ID, EtcdVersion: m.Version, Key: key, Auth: auth, TempDir: tmp,
		Compression: c.Spec.Backup.Compression, Lineage: c.Lineage(),
	})
	if err != nil {
		return backup.Manifest{}, err
	}
	c.Progress.Say("stored %s: revision %d, %s (from %s) in %s", man.ID, man.EndRevision,
		progress.Bytes(man.Size), progress.Bytes(man.RawSize), store)
	// The backup is of this cluster: a restore refuses backups of others.
	if err := c.RecordClusterID(st.Cluster.ID); err != nil {
		return man, err
	}
	return man, nil
}
