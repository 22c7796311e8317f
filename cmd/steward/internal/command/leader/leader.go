// Package leader is the `steward leader` command.
package leader

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/membership"
)

// NewCommand returns the leader command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "leader", Short: "Manage raft leadership"}
	var to string
	move := &cobra.Command{
		Use:   "move --to NAME",
		Short: "Hand leadership to a healthy voting member and wait until it leads",
		// A member named as an argument is the likeliest slip: point to
		// --to rather than cobra's "unknown command".
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("leader move takes the member with --to, not as an argument: `steward leader move --to %s`", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.RunningCluster(cmd, "move the leader")
			if err != nil {
				return err
			}
			return membership.MoveLeader(cmd.Context(), c, to)
		},
	}
	move.Flags().StringVar(&to, "to", "", "name of the member to lead (required)")
	_ = move.MarkFlagRequired("to")
	cmd.AddCommand(move)
	return cmd
}
