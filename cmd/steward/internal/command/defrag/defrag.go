// Package defrag is the `steward defrag` command.
package defrag

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/maintenance"
)

// NewCommand returns the defrag command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o maintenance.DefragOptions
	cmd := &cobra.Command{
		Use:   "defrag",
		Short: "Defragment every member, one at a time, followers first and the leader last",
		Long: `Defragment every member's database in turn: followers first, the leader last,
each only while every member is healthy. It stops at the first member that is not,
and says why: defragmenting blocks a member, and blocking one while another is down
can cost quorum.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.RunningCluster(cmd, "defragment")
			if err != nil {
				return err
			}
			res, err := maintenance.Defrag(cmd.Context(), c, o)
			// Print what was done even when a later member stopped the run.
			if perr := g.Print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "MEMBER\tDB BEFORE\tDB AFTER\tDURATION")
				for _, r := range res {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Member, cli.Bytes(r.DBSizeFrom), cli.Bytes(r.DBSizeTo), r.Duration.Round(time.Millisecond))
				}
			}); perr != nil && err == nil {
				return perr
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "time limit for each member")
	return cmd
}
