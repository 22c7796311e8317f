// Package upgrade is the `steward upgrade` command: plan and apply an etcd
// version change one minor line at a time.
package upgrade

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// NewCommand returns the upgrade command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "upgrade", Short: "Plan and apply an etcd upgrade, one minor version at a time"}
	var o upgrade.Options
	planCmd := &cobra.Command{
		Use:   "plan --to VERSION",
		Short: "Compute the steps from the live cluster to VERSION and run the pre-flight checks (nothing is changed)",
		Long: `Compute the steps from the live cluster to VERSION and run the pre-flight checks
of the whole path (binaries of every version on the way, health, alarms, leader,
database size, disk space, flags). Nothing is changed. A failed check is shown
with the plan and the command exits 1: ` + "`steward upgrade apply`" + ` would refuse the
plan (a check marked overridable is skipped by apply --force).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := cli.ProcessControl(c, cmd.CommandPath()); err != nil {
				return err
			}
			p, err := upgrade.NewPlan(cmd.Context(), c, o)
			if err != nil {
				return upgradeHint(err)
			}
			v, err := upgrade.PayloadOf(p)
			if err != nil {
				return err
			}
			checks, err := upgrade.Preflight(cmd.Context(), c, v.From, v.To)
			if err != nil {
				return upgradeHint(err)
			}
			if err := g.PrintPlan(cmd.OutOrStdout(), p); err != nil {
				return err
			}
			if g.Output == "table" {
				if err := g.Print(cmd.OutOrStdout(), checks, func(tw *tabwriter.Writer) {
					fmt.Fprintln(tw, "\nPRE-FLIGHT CHECK\tOK\tOVERRIDABLE\tMESSAGE")
					for _, ch := range checks {
						fmt.Fprintf(tw, "%s\t%v\t%v\t%s\n", ch.Name, ch.OK, ch.Overridable, cli.CheckMessage(ch))
					}
				}); err != nil {
					return err
				}
			}
			if _, err := upgrade.Refusal(checks, false); err != nil {
				return upgradeHint(fmt.Errorf("`steward upgrade apply` would refuse this plan: %w", err))
			}
			return nil
		},
	}
	apply := &cobra.Command{
		Use:   "apply --to VERSION",
		Short: "Compute, save and run the plan to VERSION; `steward plan resume` continues it after a failure or crash",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			_, err = upgrade.Apply(cmd.Context(), c, o)
			return upgradeHint(err)
		},
	}
	for _, sub := range []*cobra.Command{planCmd, apply} {
		sub.Flags().StringVar(&o.To, "to", "", "target etcd version, e.g. 3.7.3 (required)")
		sub.Flags().StringVar(&o.Strategy, "strategy", "", "rolling, offline or restore (default: rolling for several members, offline for one)")
		_ = sub.MarkFlagRequired("to")
	}
	apply.Flags().BoolVar(&o.Force, "force", false, "skip the pre-flight checks marked overridable in docs/upgrades.md")
	apply.Flags().DurationVar(&o.HealthTimeout, "health-timeout", 2*time.Minute, "how long each step waits for health, catch-up and versions before the plan fails")
	cmd.AddCommand(planCmd, apply)
	return cmd
}

// upgradeHint adds the flag that gets past a refused upgrade plan, and what
// to do after a failed step.
func upgradeHint(err error) error {
	err = cli.PlanRefusalHint(err, upgrade.ErrOverridableChecks, "use --force to skip the checks marked overridable")
	err = cli.Hint(err, cluster.ErrAgentTooOld, "upgrade steward on that host and restart its agent, or use --strategy rolling")
	err = cli.Hint(err, upgrade.ErrNoOnlineDowngrade, "roll back with `steward rollback --strategy restore`")
	return cli.PlanHint(err)
}
