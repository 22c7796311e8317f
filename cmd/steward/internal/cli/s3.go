package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/etcd-steward/steward/pkg/spec"
)

// S3Flags are the --backup-s3-* flags of commands that name a cluster's S3
// backup store (init, takeover).
type S3Flags struct{ s3 spec.S3 }

// Add registers the flags; what describes the endpoint's use.
func (s *S3Flags) Add(f *pflag.FlagSet, what string) {
	f.StringVar(&s.s3.Endpoint, "backup-s3-endpoint", "", "S3 server "+what+", https://HOST[:PORT]")
	f.StringVar(&s.s3.Bucket, "backup-s3-bucket", "", "S3 bucket of the backups")
	f.StringVar(&s.s3.Prefix, "backup-s3-prefix", "", "prefix of every backup object (one per cluster)")
	f.StringVar(&s.s3.Region, "backup-s3-region", "", "S3 region")
	f.StringVar(&s.s3.CredentialsFile, "backup-s3-credentials-file", "", "file with AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines (mode 0600)")
	f.StringVar(&s.s3.CAFile, "backup-s3-ca-file", "", "PEM bundle to trust for an S3 server with a private CA")
}

// Store returns the S3 store the flags name (nil when none), or an error
// when only half of it is given.
func (s *S3Flags) Store() (*spec.S3, error) {
	if s.s3.Endpoint == "" && s.s3.Bucket == "" {
		return nil, nil
	}
	if s.s3.Endpoint == "" || s.s3.Bucket == "" {
		return nil, fmt.Errorf("an S3 backup store needs both --backup-s3-endpoint and --backup-s3-bucket")
	}
	out := s.s3
	return &out, nil
}
