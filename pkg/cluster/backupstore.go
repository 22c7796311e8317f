package cluster

import (
	"context"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
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
