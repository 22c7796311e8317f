package restore

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/restore"
)

// leftoversCommand is `steward restore leftovers`: the kept copies of data
// dirs, with their sizes, and their pruning.
func leftoversCommand(g *cli.Globals) *cobra.Command {
	var prune bool
	var keep int
	cmd := &cobra.Command{
		Use:   "leftovers",
		Short: "List the data dirs restores and membership changes kept aside, with their sizes; --prune removes all but the newest",
		Long: `List the copies of data dirs Steward kept aside (DATADIR.KIND-STAMP beside
each member's data dir, here and on every host): pre-restore (replaced by a
restore), removed, replaced, failed-add, and restoring (staged by a restore
that was killed). Steward never removes a kept copy on its own; the next
restore removes only what an interrupted restore staged.

--prune removes every copy but the newest --keep (default 1) of each kind of
each data dir, and every staged one. It refuses, changing nothing, while a
restore, a recovery or a plan is in progress. The output says what a prune
does (or did) to each copy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := g.CheckOutput(); err != nil {
				return err
			}
			var l restore.Leftovers
			if prune {
				l, err = restore.PruneLeftovers(cmd.Context(), c, keep)
			} else {
				l, err = restore.ListLeftovers(cmd.Context(), c, keep)
			}
			if errors.Is(err, restore.ErrBadKeep) {
				return fmt.Errorf("--keep: %w (1 keeps only the newest copy of each data dir)", err)
			}
			err = cli.Hint(err, restore.ErrPruneBusy, "run the prune again once it is done")
			if l.Copies == nil {
				l.Copies = []restore.Leftover{}
			}
			if perr := g.Print(cmd.OutOrStdout(), l, func(tw *tabwriter.Writer) { leftoversTable(tw, l, prune) }); perr != nil && err == nil {
				err = perr
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&prune, "prune", false, "remove the copies marked remove")
	cmd.Flags().IntVar(&keep, "keep", 1, "copies of each kind to keep per data dir, the newest (at least 1)")
	return cmd
}

func leftoversTable(tw *tabwriter.Writer, l restore.Leftovers, pruned bool) {
	fmt.Fprintln(tw, "KIND\tMEMBER\tHOST\tCREATED\tSIZE\tPRUNE\tPATH")
	for _, c := range l.Copies {
		host := c.Host
		if host == "" {
			host = "-"
		}
		member := c.Member
		if member == "" {
			member = "-"
		}
		action := c.Action
		if c.Reason != "" {
			action += " (" + c.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Kind, member, host, c.Created.Format(time.RFC3339), progress.Bytes(c.Bytes), action, c.Path)
	}
	verb := "a prune would free"
	if pruned {
		verb = "freed"
	}
	fmt.Fprintf(tw, "\n%d copies, %s; %s %s\n", len(l.Copies), progress.Bytes(l.Bytes), verb, progress.Bytes(l.Reclaim))
	for _, u := range l.Unlisted {
		fmt.Fprintf(tw, "not listed: %s\n", u)
	}
	if l.Busy != "" && !pruned {
		fmt.Fprintf(tw, "a prune now would refuse: %s\n", l.Busy)
	}
}
