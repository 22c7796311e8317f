// Package member is the `steward member` command: add, remove, replace,
// stop and start members.
package member

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/membership"
)

// NewCommand returns the member command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "member", Short: "Change the cluster's membership"}
	cmd.AddCommand(addCommand(g), removeCommand(g), replaceCommand(g), stopCommand(g), startCommand(g))
	return cmd
}

func addCommand(g *cli.Globals) *cobra.Command {
	var o membership.AddOptions
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a member as a learner, wait until it caught up, then promote it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			return cli.DowngradeHint(membership.Add(cmd.Context(), c, args[0], o))
		},
	}
	cmd.Flags().StringVar(&o.Agent, "host", "", "host (agent) that runs the new member (default: this machine's agent, local)")
	cmd.Flags().StringVar(&o.Agent, "agent", "", "the same as --host")
	cmd.Flags().StringVar(&o.ClientURL, "client-url", "", "client URL (default: a free port on the local members' address, 127.0.0.1 unless up --address said otherwise; on another host, the next of 2379, 2389, ... on its address)")
	cmd.Flags().StringVar(&o.PeerURL, "peer-url", "", "peer URL (default: a free port on the local members' address; on another host, the next of 2380, 2390, ...)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long the learner may take to catch up")
	return cmd
}

func removeCommand(g *cli.Globals) *cobra.Command {
	var o membership.RemoveOptions
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member (leadership moves away first); its data dir is moved aside",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			return removeHint(membership.Remove(cmd.Context(), c, args[0], o))
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "remove even when the remaining members would not have a healthy quorum")
	return cmd
}

// removeHint adds what gets past a refused remove.
func removeHint(err error) error {
	err = cli.Hint(err, membership.ErrQuorumAtRisk, "use --force to remove it anyway")
	return cli.Hint(err, membership.ErrLastMember, "use `steward down --purge` to delete the whole cluster")
}

func replaceCommand(g *cli.Globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "replace NAME",
		Short: "Rebuild a member that lost its data: remove its old ID, move the data aside, re-add it as a learner, promote",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			return cli.DowngradeHint(membership.Replace(cmd.Context(), c, args[0], timeout))
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long the new learner may take to catch up")
	return cmd
}

func stopCommand(g *cli.Globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop a member's process (it stays in the cluster); the agent keeps it stopped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			err = membership.Stop(cmd.Context(), c, args[0], force)
			return cli.Hint(err, membership.ErrQuorumAtRisk, "use --force to stop it anyway")
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "stop even when the cluster would lose quorum")
	return cmd
}

func startCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "start NAME",
		Short: "Start a stopped member's process again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			return cli.RestorePendingHint(membership.Start(cmd.Context(), c, args[0]))
		},
	}
}
