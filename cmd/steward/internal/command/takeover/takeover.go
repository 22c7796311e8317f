// Package takeover is the `steward takeover` command: another machine
// becomes the coordinator of a multi-host cluster whose coordinator is lost.
package takeover

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
)

// NewCommand returns the takeover command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var (
		o  bootstrap.TakeOverOptions
		s3 cli.S3Flags
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
			if o.S3, err = s3.Store(); err != nil {
				return err
			}
			// The spec keeps these paths: absolute, whatever the cwd later.
			paths := []*string{&o.PKIDir, &o.StoreDir, &o.BinaryStore, &o.KeyFile}
			if o.S3 != nil {
				paths = append(paths, &o.S3.CredentialsFile, &o.S3.CAFile)
			}
			for _, p := range paths {
				if *p != "" {
					if *p, err = filepath.Abs(*p); err != nil {
						return err
					}
				}
			}
			t, err := bootstrap.TakeOver(cmd.Context(), dir, o, cli.Progress(cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "this directory (%s) coordinates the cluster as generation %d", dir, t.Generation)
			for _, p := range t.Plans {
				if p.Active() {
					fmt.Fprintf(cmd.OutOrStdout(), "; plan %s is %s: `steward plan resume` finishes it", p.ID, p.State)
				}
			}
			if t.RecoveryJournal != nil {
				fmt.Fprint(cmd.OutOrStdout(), "; a recovery is unfinished: `steward recover` finishes it")
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
	s3.Add(f, "of the cluster's backups")
	return cmd
}
