package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// BackupStore opens the cluster's backup store: the S3 bucket when the spec
// names one, else the local directory.
func (c *Cluster) BackupStore(ctx context.Context) (backup.Store, error) {
	if s3 := c.Spec.Backup.S3; s3 != nil {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		return backup.NewS3Store(ctx, backup.S3Config{
			Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: s3.Prefix, Region: s3.Region,
			CredentialsFile: spec.Path(c.Dir, s3.CredentialsFile), CAFile: spec.Path(c.Dir, s3.CAFile),
		})
	}
	return backup.NewLocalStore(c.Spec.BackupStoreDir(c.Dir))
}

// BackupKey loads the backup encryption key from keyFile, else from the
// spec's backup.encryptionKeyFile; nil when neither names one.
func (c *Cluster) BackupKey(keyFile string) (*backup.Key, error) {
	if keyFile == "" {
		keyFile = spec.Path(c.Dir, c.Spec.Backup.EncryptionKeyFile)
	}
	if keyFile == "" {
		return nil, nil
	}
	return backup.LoadKey(keyFile)
}

// BackupAuthKeyPath is where the cluster backup key lives: beside the
// certificates (pki.BackupAuthKey).
func (c *Cluster) BackupAuthKeyPath() string { return filepath.Join(c.CertDir(), pki.BackupAuthKey) }

// BackupAuthKey loads the cluster backup key, which authenticates every
// backup manifest. A coordinator whose cluster predates the key (Steward
// upgraded) generates it on first use and says so: manifests written before
// it carry no MAC, and only an operator's explicit choice trusts them. A
// host of a multi-host cluster never generates one (its manifests would not
// verify on the coordinator): it receives the coordinator's in its join
// file and with every hand-over of the spec.
func (c *Cluster) BackupAuthKey() (*backup.AuthKey, error) {
	p := c.BackupAuthKeyPath()
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		if c.onJoinedHost() {
			return nil, fmt.Errorf("no cluster backup key at %s: this host receives the coordinator's with the spec (run any command that saves the spec on the coordinator, or join again)", p)
		}
		created, err := pki.EnsureBackupAuthKey(c.CertDir())
		if err != nil {
			return nil, err
		}
		if created {
			c.Progress.Say("generated the cluster backup key %s (0600): backup manifests are authenticated from now on; manifests written before are not trusted unless restored deliberately (docs/backup.md)", p)
		}
	}
	return backup.LoadAuthKey(p)
}

// Backups lists the trusted backups of the store (package backup, List)
// under the cluster backup key, and the manifests it ignored.
func (c *Cluster) Backups(ctx context.Context, store backup.Store, allowUnauthenticated bool) (backup.Listing, error) {
	key, err := c.BackupAuthKey()
	if err != nil {
		return backup.Listing{}, err
	}
	return backup.List(ctx, store, backup.ListOptions{Key: key, AllowUnauthenticated: allowUnauthenticated})
}

// onJoinedHost reports whether this directory is a joined host's: its
// client certificate is a host's, not the admin's. A directory without any
// client certificate (a fresh one, a restore into a new directory) is not.
func (c *Cluster) onJoinedHost() bool {
	if c.Spec.TLS.Disabled || c.Spec.IsExternal() {
		return false
	}
	cn, err := pki.CommonName(pki.FilesIn(c.CertDir()).ClientCert)
	return err == nil && cn != pki.AdminCN
}

// Lineage is the cluster's current timeline as backups record it (the
// spec's Timeline; the zero Lineage, timeline 1, when none is recorded).
func (c *Cluster) Lineage() backup.Lineage {
	t := c.Spec.Timeline
	if t == nil || t.ID <= 1 {
		return backup.Lineage{}
	}
	return backup.Lineage{Timeline: t.ID, ParentTimeline: t.Parent, BranchRevision: t.BranchRevision}
}

// S3CACheckTimeout bounds CheckS3CA's connection and handshake.
const S3CACheckTimeout = 10 * time.Second

// CheckS3CA checks, before a spec is written (init, up, SaveSpec), that
// s's backup.s3.caFile verifies its S3 server, so a wrong CA is refused
// then and not at the first backup on some host. Nothing to check without
// a caFile. A CA file that is missing, unreadable, not PEM certificates or
// does not verify the server fails (wrapping backup.ErrS3CA); a server
// that cannot be reached now is not a reason to refuse: the returned
// warning says it was not checked.
func (c *Cluster) CheckS3CA(ctx context.Context, s *spec.Cluster) (warning string, err error) {
	s3 := s.Backup.S3
	if s3 == nil || s3.CAFile == "" {
		return "", nil
	}
	err = backup.CheckS3Server(ctx, s3.Endpoint, spec.Path(c.Dir, s3.CAFile), S3CACheckTimeout)
	if errors.Is(err, backup.ErrS3Unreachable) {
		return fmt.Sprintf("backup.s3.caFile not checked: %v", err), nil
	}
	if err != nil {
		return "", fmt.Errorf("backup.s3.caFile: %w", err)
	}
	return "", nil
}
