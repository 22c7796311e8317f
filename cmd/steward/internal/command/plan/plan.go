// Package plan is the `steward plan` command: show, resume and abort the
// latest upgrade, rollback, CA rotation (or its rollback) or adopt plan.
package plan

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// NewCommand returns the plan command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "plan", Short: "Show, resume or abort the latest upgrade, rollback, CA rotation or adopt plan"}
	show := &cobra.Command{
		Use:   "show",
		Short: "List the latest plan's steps with their state, member, times and error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			p, err := c.Plans().Latest()
			if err != nil {
				return err
			}
			return g.PrintPlan(cmd.OutOrStdout(), p)
		},
	}
	resume := &cobra.Command{
		Use:   "resume",
		Short: "Continue the latest plan from its first step that is not done",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			p, err := c.Plans().Latest()
			if err != nil {
				// No plan (or none readable): the cluster's own refusal
				// first, as for a plan that runs on it.
				if _, cerr := g.ClusterWithAgent(cmd); cerr != nil {
					return cerr
				}
				return err
			}
			k, err := cluster.PlanKinds.For(p)
			if err != nil {
				return err
			}
			if k.Attached {
				// A plan that runs on an attached cluster, which refuses
				// ClusterWithAgent until every member is adopted: only this
				// machine's agent.
				if _, err := cluster.PlanKinds.Resumable(p); err != nil {
					return err
				}
				if err := cli.EnsureAgent(cmd.Context(), c); err != nil {
					return err
				}
			} else if c, err = g.ClusterStartingAgent(cmd); err != nil {
				return err
			}
			return cli.PlanHint(cluster.PlanKinds.Resume(cmd.Context(), c, p))
		},
	}
	abort := &cobra.Command{
		Use:   "abort",
		Short: "Stop the latest plan after the step in progress (at once when nothing runs it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			p, err := upgrade.Abort(cmd.Context(), c)
			if err != nil {
				return err
			}
			if p.State == plan.Aborted {
				fmt.Fprintf(cmd.ErrOrStderr(), "plan %s aborted\n", p.ID)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "plan %s stops after its current step\n", p.ID)
			}
			return nil
		},
	}
	cmd.AddCommand(show, resume, abort)
	return cmd
}
