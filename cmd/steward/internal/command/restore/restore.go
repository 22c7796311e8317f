// Package restore is the `steward restore` command.
package restore

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/restore"
)

// NewCommand returns the restore command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o restore.Options
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Build every member's data dir from a full backup or a snapshot file (cluster must be stopped)",
		Long: `Build a data dir for every member of the spec from a full backup and the
deltas after it, or, with --from-snapshot, from a snapshot file saved by
` + "`etcdctl snapshot save`" + ` (of any etcd cluster). The backup is fetched and
verified first; a snapshot file must end with the SHA-256 of its content, as
etcdutl checks, and pass bbolt's consistency check. Every restore begins a new
timeline branched off the one restored; latest is the newest point of the
timeline the cluster is on (--timeline chooses another). etcd resumes
--bump-revision above the highest revision ever served or backed up on any
timeline, and the old range is marked compacted, so no client sees a revision
twice or going backwards and watchers re-list instead of silently missing
changes. Existing data dirs are
refused unless --force, which moves them aside (never deletes them). Start the
restored cluster with ` + "`steward up`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := c.RequireProcessControl("restore into its members"); err != nil {
				// Its backups restore into a new cluster Steward runs.
				return fmt.Errorf("%w; restore its backups into a new cluster instead: a new --dir whose spec's backup.store is this one's (docs/attach.md)", err)
			}
			_, err = restore.Run(cmd.Context(), c, o)
			err = cli.Hint(err, restore.ErrOtherCluster, "use --allow-other-cluster to build this cluster from it anyway")
			err = cli.Hint(err, restore.ErrUntrustedManifests, "remove or repair them, use --allow-unauthenticated for manifests written before the cluster had its backup key, or --skip-untrusted to restore without them")
			tooNew := "name the older backup with --backup ID"
			if o.Timeline != 0 {
				tooNew += " (in place of --timeline: a backup ID names its own timeline)"
			}
			err = cli.Hint(err, restore.ErrBackupTooNew, tooNew)
			err = cli.Hint(err, restore.ErrDataDirsHoldData, "use --force to move them aside (they are kept, not deleted)")
			err = cli.Hint(err, restore.ErrSourceConflict, "leave out --backup, --to-revision, --to-time, --timeline, --key-file, --allow-unauthenticated and --skip-untrusted with --from-snapshot")
			err = cli.Hint(err, restore.ErrConflictingTargets, "give one of --to-revision and --to-time, and --timeline only without --backup")
			err = cli.Hint(err, restore.ErrAbandonedTimeline, "to restore the point it would, give that timeline and revision with --timeline and --to-revision; leave out --timeline to restore the one the cluster is on")
			err = cli.Hint(err, restore.ErrUnknownTimeline, "`steward backup list` shows each backup's timeline; leave out --timeline to restore the one the cluster is on")
			err = cli.KeyHint(err)
			err = cli.RestorePendingHint(cli.BackupHint(cli.StoppedHint(err)))
			if errors.Is(err, restore.ErrBadRevision) {
				err = fmt.Errorf("--to-revision: %w (leave it out to restore the newest backed-up revision)", err)
			}
			if gap, ok := errors.AsType[*restore.GapError](err); ok {
				err = fmt.Errorf("%w; restore up to the gap explicitly with --to-revision %d", err, gap.End)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&o.Backup, "backup", "latest", "backup ID, or latest")
	cmd.Flags().StringVar(&o.FromSnapshot, "from-snapshot", "", "restore from the snapshot `FILE` etcdctl snapshot save wrote, instead of the backup store")
	cmd.Flags().StringVar(&o.KeyFile, "key-file", "", "decryption key (default: the spec's backup.encryptionKeyFile)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "move existing data dirs aside instead of refusing")
	cmd.Flags().BoolVar(&o.AllowOtherCluster, "allow-other-cluster", false, "restore a backup of another etcd cluster than the one last seen for this spec")
	cmd.Flags().BoolVar(&o.SkipUntrusted, "skip-untrusted", false, "restore even though newer manifests in the store are not trusted, leaving out what they describe")
	cmd.Flags().BoolVar(&o.AllowUnauthenticated, "allow-unauthenticated", false, "also trust backup manifests without a MAC (written before the cluster had its backup key); never ones whose MAC fails")
	cmd.Flags().Int64Var(&o.ToRevision, "to-revision", 0, "restore the keyspace as it was at this revision (default: the newest backed up)")
	cmd.Flags().Var(timeFlag{&o.ToTime}, "to-time", "restore the keyspace as it was at this `TIME` (RFC 3339, e.g. 2026-11-21T13:00:00Z)")
	cmd.Flags().Int64Var(&o.Timeline, "timeline", 0, "restore timeline `N` (its newest point, or --to-revision/--to-time on it) instead of the one the cluster is on; steward backup list shows each backup's")
	cmd.Flags().Uint64Var(&o.BumpRevision, "bump-revision", restore.DefaultBumpRevision, "margin above the highest revision ever served or backed up, on any timeline, that etcd resumes above; must exceed the writes made after the last backup")
	cmd.AddCommand(leftoversCommand(g))
	return cmd
}

type timeFlag struct{ t *time.Time }

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timeFlag) Set(s string) error {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want RFC 3339 time like 2026-11-21T13:00:00Z: %w", err)
	}
	*f.t = t
	return nil
}

func (timeFlag) Type() string { return "time" }
