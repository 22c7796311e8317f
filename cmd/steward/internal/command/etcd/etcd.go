// Package etcd is the hidden `steward etcd` command: the etcd server linked
// into Steward. The agent runs members of the embedded version by
// re-executing the steward binary with this command, so a member is always a
// child process and never shares the agent's address space.
package etcd

import (
	"os"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
)

// NewCommand returns the hidden etcd command.
func NewCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "etcd [etcd flags]",
		Short:              "Run the embedded etcd server (used by the agent)",
		Hidden:             true,
		DisableFlagParsing: true,
		Run: func(_ *cobra.Command, args []string) {
			etcdmain.Main(append([]string{"etcd"}, args...))
			os.Exit(0)
		},
	}
}
