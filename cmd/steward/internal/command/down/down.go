// Package down is the `steward down` command.
package down

import (
	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/bootstrap"
)

// NewCommand returns the down command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var o bootstrap.DownOptions
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every member and the agent; data is kept unless --purge",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			return bootstrap.Down(cmd.Context(), dir, o, cli.Progress(cmd.ErrOrStderr()))
		},
	}
	cmd.Flags().BoolVar(&o.Purge, "purge", false, "delete the Steward directory (data, certificates, logs) after stopping")
	return cmd
}
