// Package rollback is the `steward rollback` command.
package rollback

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// NewCommand returns the rollback command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o plan.UndoOptions
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Return the cluster to the etcd version it had before the last upgrade plan, or to its CA before a CA rotation that did not finish, as a plan of its own",
		Long: `Plan the way back, as a plan of its own (` + "`steward plan show|resume|abort`" + `):

- when the latest plan is a CA rotation that did not finish (aborted, failed or
  interrupted) or the rollback of one: every leaf issued by the old CA again, ca.crt
  the old CA alone (on joined hosts too), the new CA moved aside; refused once the
  rotation's drop step began (docs/certificates.md);
- otherwise: the etcd version before the last upgrade plan (docs/upgrades.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			// What rolls back the latest plan is its kind's to say (a CA
			// rotation that did not finish: its rollback; else the last
			// upgrade's).
			latest, err := c.Plans().Latest()
			if err != nil {
				latest = nil // no plan: the default's refusal says so
			}
			k, err := cluster.PlanKinds.UndoFor(latest)
			if err != nil {
				return err
			}
			_, err = k.Rollback(cmd.Context(), c, o)
			return rollbackHint(err)
		},
	}
	cmd.Flags().StringVar(&o.Strategy, "strategy", "", "rolling (etcd's online downgrade) or restore (the backup taken before the upgrade with every later write grafted in); default: rolling where etcd has an online downgrade")
	cmd.Flags().BoolVar(&o.Force, "force", false, "skip the pre-flight checks marked overridable in docs/upgrades.md")
	cmd.Flags().DurationVar(&o.HealthTimeout, "health-timeout", 2*time.Minute, "how long each step waits for health, catch-up and versions before the plan fails")
	return cmd
}

// rollbackHint adds the flag that gets past a refused rollback plan, the
// commands that show, finish or stop the plans a refusal is about (of an
// upgrade's rollback or a CA rotation's: whichever kind the registry
// started), and what to do after a failed step.
func rollbackHint(err error) error {
	err = cli.PlanRefusalHint(err, upgrade.ErrOverridableChecks, "use --force to skip the checks marked overridable")
	err = cli.Hint(err, cluster.ErrAgentTooOld, "upgrade steward on that host and restart its agent, or use --strategy rolling")
	err = cli.Hint(err, upgrade.ErrNoOnlineDowngrade, "roll back with --strategy restore")
	err = cli.Advise(err, upgrade.ErrNoUpgrade, ": `steward plan show` lists the plans")
	err = cli.CARollbackHint(err)
	return cli.PlanHint(err)
}
