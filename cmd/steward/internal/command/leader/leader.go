// Package leader is the `steward leader` command.
package leader

import (
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
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.Cluster(cmd)
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
