// Package alarm is the `steward alarm` command.
package alarm

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/maintenance"
)

// NewCommand returns the alarm command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "alarm", Short: "List and clear etcd alarms"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List raised alarms",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.RunningCluster(cmd, "list alarms")
			if err != nil {
				return err
			}
			alarms, err := maintenance.Alarms(cmd.Context(), c)
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), alarms, func(tw *tabwriter.Writer) { table(tw, alarms) })
		},
	}
	var o maintenance.DisarmOptions
	disarm := &cobra.Command{
		Use:   "disarm",
		Short: "Clear alarms; for NOSPACE, compact and defragment first so the alarm does not return",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.RunningCluster(cmd, "disarm alarms")
			if err != nil {
				return err
			}
			alarms, err := maintenance.Disarm(cmd.Context(), c, o)
			if err = disarmHint(err); err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), alarms, func(tw *tabwriter.Writer) { table(tw, alarms) })
		},
	}
	disarm.Flags().BoolVar(&o.Force, "force", false, "also disarm CORRUPT alarms")
	cmd.AddCommand(list, disarm)
	return cmd
}

func table(tw *tabwriter.Writer, alarms []maintenance.Alarm) {
	fmt.Fprintln(tw, "MEMBER\tID\tALARM")
	for _, a := range alarms {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.MemberName, a.MemberID, a.Alarm)
	}
}

// disarmHint adds to a refused disarm of a CORRUPT alarm the command that
// rebuilds the member, and the flag that disarms it anyway.
func disarmHint(err error) error {
	if ce, ok := errors.AsType[*maintenance.CorruptError](err); ok {
		err = fmt.Errorf("%w; replace it with `steward member replace %s`", err, ce.Member)
	}
	return cli.Hint(err, maintenance.ErrCorrupt, "use --force to disarm it anyway")
}
