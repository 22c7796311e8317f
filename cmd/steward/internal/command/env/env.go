// Package env is the `steward env` command.
package env

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
)

// NewCommand returns the env command.
func NewCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Print shell exports that point etcdctl and other clients at the cluster",
		Example: `  eval "$(steward env)"
  etcdctl endpoint status -w table`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			c, err := cli.Open(dir)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), c.Env())
			return nil
		},
	}
}
