// Package recovery is the `steward recover` command.
package recovery

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/restore"
)

// NewCommand returns the recover command.
func NewCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "recover",
		Short: "Bring back a cluster that lost quorum: restart members with valid data, or restore from backup",
		Long: `Recover a cluster that lost quorum. Every member is stopped and its data dir
checked (WAL present, database opens, its revision). When a majority still
has valid data, those members are restarted (nothing is lost) and the others
replaced. Otherwise every member is restored from the newest backup with its
deltas (old data dirs moved aside), started, and a fresh full snapshot taken.
A quorate cluster is left alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.ClusterStartingAgent(cmd)
			if err != nil {
				return err
			}
			rep, err := recovery.Run(cmd.Context(), c)
			if rep.Message == recovery.QuorateMessage {
				rep.Message += " (replace single members with `steward member replace`)"
			}
			err = cli.RestorePendingHint(cli.DowngradeHint(cli.BackupHint(cli.StoppedHint(err))))
			err = cli.Advise(err, recovery.ErrStaleJournal, " (`steward status` shows the members' health)")
			err = cli.Hint(err, restore.ErrBackupTooNew, "restore the older backup with `steward restore --force --backup ID`, then `steward up`")
			if perr := g.Print(cmd.OutOrStdout(), rep, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "ACTION\t%s\nMESSAGE\t%s\n", rep.Action, rep.Message)
				for _, f := range rep.DataDirs {
					fmt.Fprintf(tw, "DATA DIR\t%s\n", f)
				}
			}); perr != nil && err == nil {
				return perr
			}
			return err
		},
	}
}
