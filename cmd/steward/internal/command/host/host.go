// Package host is the `steward host` command: hosts of a multi-host cluster.
package host

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/spec"
)

// NewCommand returns the host command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "host", Short: "Hosts of a multi-host cluster"}
	var port int
	var validity = join.DefaultValidity
	add := &cobra.Command{
		Use:   "add NAME=ADDRESS",
		Short: "Add a host (its agent) to the spec and write its join file; for a host already there, a new join file",
		Long: `Add a host to the cluster spec and write DIR/join/NAME.yaml (0600) for its agent. Members
go onto it with 'steward member add MEMBER --host NAME' once its agent runs.
For a host already in the spec at that address, write a new join file (new certificates),
for instance after the first one expired.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := spec.ParseHost(args[0])
			if err != nil {
				return err
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := cli.ProcessControl(c, cmd.CommandPath()); err != nil {
				return err
			}
			p, err := bootstrap.AddHost(cmd.Context(), c, h, port, validity)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\non host %s (%s): steward agent --dir /var/lib/steward --join %s\n", p, h.Name, h.Address, p)
			return nil
		},
	}
	add.Flags().IntVar(&port, "port", spec.DefaultAgentPort, "the agent API's port on the host (mutual TLS)")
	add.Flags().DurationVar(&validity, "join-validity", join.DefaultValidity, "how long the join file can be used")
	cmd.AddCommand(add)
	return cmd
}
