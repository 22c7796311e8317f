// Package backup is the `steward backup` command: take, list, verify and
// export backups.
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
	cmd := &cobra.Command{Use: "backup", Short: "Take, list, verify, compact and export backups"}
	cmd.AddCommand(nowCommand(g), listCommand(g), verifyCommand(g), gcCommand(g), compactCommand(g), keygenCommand(g), exportCommand(g))
	return cmd
}

func nowCommand(g *cli.Globals) *cobra.Command {
	var o backupd.Options
	cmd := &cobra.Command{
		Use:   "now",
		Short: "Take a verified full snapshot now (from the leader unless --member)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.RunningCluster(cmd, "take a backup")
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
				return cli.BackupHint(err)
			}
			return g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				if !res.Compacted {
					fmt.Fprintf(tw, "nothing compacted: %s\n", res.Reason)
					return
				}
				fmt.Fprintln(tw, "FROM\tDELTAS\tDELTA SIZE\tNEW BACKUP\tREVISION\tDIGEST")
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", res.From, res.Deltas, cli.Bytes(res.DeltaBytes), res.Backup.ID, res.Backup.EndRevision, res.Digest)
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
			// Every backup names its timeline, also the first (manifests
			// written before timelines carry none).
			for i := range ms {
				ms[i].Timeline = ms[i].TimelineID()
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
				return cli.BackupHint(err)
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
	fmt.Fprintln(tw, "ID\tKIND\tTIMELINE\tSTART REV\tEND REV\tSIZE\tCREATED\tETCD\tCLUSTER ID\tENCRYPTED")
	for _, m := range ms {
		enc := "-"
		if m.Encryption != "" {
			enc = m.Encryption + " (key " + m.KeyID + ")"
		}
		tl := fmt.Sprint(m.TimelineID())
		if m.ParentTimeline != 0 {
			tl += fmt.Sprintf(" (from %d at %d)", m.ParentTimeline, m.BranchRevision)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, tl, m.StartRevision, m.EndRevision, cli.Bytes(m.Size),
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

func exportCommand(g *cli.Globals) *cobra.Command {
	var o restore.ExportOptions
	cmd := &cobra.Command{
		Use:   "export ID|latest --to FILE",
		Short: "Write a backup (a full one, or up to a revision with its deltas) as a plain etcd snapshot file",
		Long: `Write a backup as a plain etcd snapshot file, the form ` + "`etcdctl snapshot save`" + `
writes: the database followed by its SHA-256, which ` + "`etcdutl snapshot restore`" + `
checks and accepts. A full backup is exported at its own revision; a delta at
its end revision, built from the newest full backup before it and the deltas
up to it; --to-revision exports the keyspace at that revision instead. Revisions
are not bumped (etcdutl's --bump-revision does that on restore). The file is
written 0600 and atomically, and an existing file is never replaced.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.To == "" {
				return errors.New("name the snapshot file to write with --to FILE")
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			o.Backup = args[0]
			res, err := restore.Export(cmd.Context(), c, o)
			err = cli.Hint(err, restore.ErrUntrustedManifests, "remove or repair them, use --allow-unauthenticated for manifests written before the cluster had its backup key, or --skip-untrusted to export without them")
			err = cli.BackupHint(cli.KeyHint(err))
			if errors.Is(err, restore.ErrBadRevision) {
				err = fmt.Errorf("--to-revision: %w (leave it out to export the backup's own revision)", err)
			}
			if gap, ok := errors.AsType[*restore.GapError](err); ok {
				err = fmt.Errorf("%w; export up to the gap explicitly with --to-revision %d", err, gap.End)
			}
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "FILE\tBACKUP\tDELTAS\tREVISION\tSIZE\tSHA256")
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", res.File, res.Backup, res.Deltas, res.Revision, cli.Bytes(res.Size), res.SHA256)
			})
		},
	}
	cmd.Flags().StringVar(&o.To, "to", "", "snapshot file to write (must not exist)")
	cmd.Flags().Int64Var(&o.ToRevision, "to-revision", 0, "export the keyspace as it was at this revision (default: the backup's end revision)")
	cmd.Flags().StringVar(&o.KeyFile, "key-file", "", "decryption key (default: the spec's backup.encryptionKeyFile)")
	cmd.Flags().BoolVar(&o.AllowUnauthenticated, "allow-unauthenticated", false, "also trust backup manifests without a MAC (written before the cluster had its backup key); never ones whose MAC fails")
	cmd.Flags().BoolVar(&o.SkipUntrusted, "skip-untrusted", false, "export even though newer manifests in the store are not trusted, leaving out what they describe")
	return cmd
}
