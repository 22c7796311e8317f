// Package backup is the `steward backup` command: take, list and verify
// backups.
package backup

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/restore"
)

// NewCommand returns the backup command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "backup", Short: "Take, list and verify backups"}
	cmd.AddCommand(nowCommand(g), listCommand(g), verifyCommand(g), gcCommand(g), compactCommand(g), keygenCommand(g))
	return cmd
}

func nowCommand(g *cli.Globals) *cobra.Command {
	var o backupd.Options
	cmd := &cobra.Command{
		Use:   "now",
		Short: "Take a verified full snapshot now (from the leader unless --member)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			m, err := backupd.Now(cmd.Context(), c, o)
			err = cli.Hint(err, backupd.ErrNoLeader, "name a healthy member with --member")
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), m, func(tw *tabwriter.Writer) { table(tw, []backup.Manifest{m}) })
		},
	}
	cmd.Flags().StringVar(&o.Member, "member", "", "member to stream the snapshot from (default: the leader)")
	cmd.Flags().StringVar(&o.KeyFile, "key-file", "", "encrypt with the key in this file (default: the spec's backup.encryptionKeyFile)")
	return cmd
}

func compactCommand(g *cli.Globals) *cobra.Command {
	var o backupd.CompactOptions
	cmd := &cobra.Command{
		Use:   "compact [ID]",
		Short: "Fold a full backup (default: the newest) and its deltas into a new verified full backup, from the store alone",
		Long: `Fold a full backup and the delta segments that continue it into a new full
backup at the chain's end, reading only the backup store (the cluster may be
down). The new backup is stored only once its keyspace digest equals the
chain's replayed; then retention applies as after any full backup. The
backup leader does the same on its own when backup.compactAfter is set.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				o.Backup = args[0]
			}
			res, err := backupd.Compact(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				if !res.Compacted {
					fmt.Fprintf(tw, "nothing compacted: %s\n", res.Reason)
					return
				}
				fmt.Fprintln(tw, "FROM\tDELTAS\tDELTA BYTES\tNEW BACKUP\tREVISION\tDIGEST")
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\n", res.From, res.Deltas, res.DeltaBytes, res.Backup.ID, res.Backup.EndRevision, res.Digest)
			})
		},
	}
	cmd.Flags().BoolVar(&o.IfDue, "if-due", false, "compact only when the chain has reached the spec's backup.compactAfter")
	cmd.Flags().StringVar(&o.KeyFile, "key-file", "", "the encryption key (default: the spec's backup.encryptionKeyFile)")
	return cmd
}

func listCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List complete backups, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			l, err := restore.List(cmd.Context(), c)
			if err != nil {
				return err
			}
			ms := l.Backups
			if ms == nil {
				ms = []backup.Manifest{}
			}
			// Untrusted manifests are named on stderr; the JSON list on
			// stdout keeps its shape.
			for _, i := range l.Ignored {
				fmt.Fprintf(cmd.ErrOrStderr(), "ignored %s\n", i)
			}
			return g.Print(cmd.OutOrStdout(), ms, func(tw *tabwriter.Writer) { table(tw, ms) })
		},
	}
}

func verifyCommand(g *cli.Globals) *cobra.Command {
	var all, allowUnauthenticated bool
	var keyFile string
	cmd := &cobra.Command{
		Use:   "verify [ID|--all]",
		Short: "Check backups: checksums, key, decompression, database consistency, revision",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !all {
				return errors.New("name a backup ID, or --all")
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			res, err := restore.Verify(cmd.Context(), c, id, keyFile, allowUnauthenticated)
			if err != nil {
				return err
			}
			for i := range res {
				if res[i].Err != nil {
					res[i].Error = cli.KeyHint(res[i].Err).Error()
				}
			}
			if err := g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "ID\tOK\tERROR")
				for _, r := range res {
					fmt.Fprintf(tw, "%s\t%v\t%s\n", r.ID, r.OK, r.Error)
				}
			}); err != nil {
				return err
			}
			for _, r := range res {
				if !r.OK {
					return fmt.Errorf("backup %s failed verification", r.ID)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "verify every backup")
	cmd.Flags().BoolVar(&allowUnauthenticated, "allow-unauthenticated", false, "also verify backups whose manifests carry no MAC (written before the cluster had its backup key)")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "decryption key (default: the spec's backup.encryptionKeyFile)")
	return cmd
}

func table(tw *tabwriter.Writer, ms []backup.Manifest) {
	fmt.Fprintln(tw, "ID\tKIND\tSTART REV\tEND REV\tSIZE\tCREATED\tETCD\tCLUSTER ID\tENCRYPTED")
	for _, m := range ms {
		enc := "-"
		if m.Encryption != "" {
			enc = m.Encryption + " (key " + m.KeyID + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, m.StartRevision, m.EndRevision, m.Size,
			m.CreatedAt.Format(time.RFC3339), m.EtcdVersion, m.ClusterID, enc)
	}
}

func gcCommand(g *cli.Globals) *cobra.Command {
	var dry bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete backups the spec's retention no longer keeps (the agent also runs it after each full snapshot)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			res, err := restore.Collect(cmd.Context(), c, dry)
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "BACKUP\tACTION")
				verb := "delete"
				if !dry {
					verb = "deleted"
				}
				for _, id := range res.Deleted {
					fmt.Fprintf(tw, "%s\t%s\n", id, verb)
				}
				for _, id := range res.Kept {
					fmt.Fprintf(tw, "%s\tkeep\n", id)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&dry, "dry-run", false, "only say what would be deleted")
	return cmd
}
