// Package takeover is the `steward takeover` command: another machine
// becomes the coordinator of a multi-host cluster whose coordinator is lost.
package takeover

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// NewCommand returns the takeover command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var (
		o  bootstrap.TakeOverOptions
		s3 spec.S3
	)
	cmd := &cobra.Command{
		Use:   "takeover --pki DIR (--backup-s3-endpoint URL --backup-s3-bucket B ... | --backup-store DIR)",
		Short: "Become the coordinator of a multi-host cluster whose coordinator is lost",
		Long: `Make this machine's Steward directory the coordinator of a multi-host cluster whose
coordinator is gone (dead host, lost disk). The coordinator keeps a signed copy of the
spec and of every plan's state in the cluster's backup store; takeover reads the newest
ones, checks each against the admin certificate in --pki (the admin credentials:
ca.crt, client.crt, client.key, and ca.key to add hosts later), writes them into DIR
and claims the next coordinator generation. Then 'steward plan resume' finishes a plan
that was running. Should the old coordinator come back, it stops before its next step
("another coordinator took over").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			if o.PKIDir == "" {
				return fmt.Errorf("--pki: name the directory with the admin credentials (ca.crt, client.crt, client.key)")
			}
			// The spec keeps these paths: absolute, whatever the cwd later.
			for _, p := range []*string{&o.PKIDir, &o.StoreDir, &o.BinaryStore, &o.KeyFile, &s3.CredentialsFile, &s3.CAFile} {
				if *p != "" {
					if *p, err = filepath.Abs(*p); err != nil {
						return err
					}
				}
			}
			if s3.Endpoint != "" || s3.Bucket != "" {
				if s3.Endpoint == "" || s3.Bucket == "" {
					return fmt.Errorf("an S3 backup store needs both --backup-s3-endpoint and --backup-s3-bucket")
				}
				o.S3 = &s3
			}
			t, err := bootstrap.TakeOver(cmd.Context(), dir, o, progress.To(cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "this directory (%s) coordinates the cluster as generation %d", dir, t.Generation)
			for _, p := range t.Plans {
				if p.Active() {
					fmt.Fprintf(cmd.OutOrStdout(), "; plan %s is %s: `steward plan resume` finishes it", p.ID, p.State)
				}
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PKIDir, "pki", "", "directory with the admin credentials (ca.crt, client.crt, client.key; ca.key to add hosts)")
	f.StringVar(&o.StoreDir, "backup-store", "", "the cluster's backup store when it is a shared directory")
	f.StringVar(&o.BinaryStore, "binary-store", "", "binary store on this machine (default DIR/binaries)")
	f.StringVar(&o.KeyFile, "backup-key-file", "", "this machine's copy of the backup encryption key, when backups are encrypted")
	f.StringVar(&s3.Endpoint, "backup-s3-endpoint", "", "S3 server of the cluster's backups")
	f.StringVar(&s3.Bucket, "backup-s3-bucket", "", "S3 bucket")
	f.StringVar(&s3.Prefix, "backup-s3-prefix", "", "prefix of the cluster's objects")
	f.StringVar(&s3.Region, "backup-s3-region", "", "S3 region")
	f.StringVar(&s3.CredentialsFile, "backup-s3-credentials-file", "", "file with AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines (mode 0600)")
	f.StringVar(&s3.CAFile, "backup-s3-ca-file", "", "PEM bundle to trust for an S3 server with a private CA")
	return cmd
}
