// Package cmd assembles the steward command tree. Each command lives in its
// own package under internal/cmd and is a thin layer over a library package.
package cmd

import (
	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/cli"
	"github.com/etcd-steward/steward/internal/cmd/agent"
	"github.com/etcd-steward/steward/internal/cmd/alarm"
	"github.com/etcd-steward/steward/internal/cmd/backup"
	"github.com/etcd-steward/steward/internal/cmd/binaries"
	"github.com/etcd-steward/steward/internal/cmd/defrag"
	"github.com/etcd-steward/steward/internal/cmd/down"
	"github.com/etcd-steward/steward/internal/cmd/env"
	"github.com/etcd-steward/steward/internal/cmd/etcd"
	"github.com/etcd-steward/steward/internal/cmd/inspect"
	"github.com/etcd-steward/steward/internal/cmd/leader"
	"github.com/etcd-steward/steward/internal/cmd/member"
	"github.com/etcd-steward/steward/internal/cmd/migrate"
	"github.com/etcd-steward/steward/internal/cmd/plan"
	"github.com/etcd-steward/steward/internal/cmd/recovery"
	"github.com/etcd-steward/steward/internal/cmd/restore"
	"github.com/etcd-steward/steward/internal/cmd/rollback"
	"github.com/etcd-steward/steward/internal/cmd/status"
	"github.com/etcd-steward/steward/internal/cmd/up"
	"github.com/etcd-steward/steward/internal/cmd/upgrade"
)

// NewRootCommand returns the steward root command with every subcommand.
func NewRootCommand() *cobra.Command {
	g := &cli.Globals{}
	root := &cobra.Command{
		Use:           "steward",
		Short:         "Steward runs, backs up, upgrades and recovers etcd clusters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.AddFlags(root)
	root.AddCommand(
		up.NewCommand(g),
		down.NewCommand(g),
		env.NewCommand(g),
		status.NewCommand(g),
		member.NewCommand(g),
		leader.NewCommand(g),
		defrag.NewCommand(g),
		alarm.NewCommand(g),
		backup.NewCommand(g),
		restore.NewCommand(g),
		recovery.NewCommand(g),
		upgrade.NewCommand(g),
		rollback.NewCommand(g),
		plan.NewCommand(g),
		inspect.NewCommand(g),
		migrate.NewCommand(g),
		agent.NewCommand(g),
		binaries.NewCommand(g),
		etcd.NewCommand(),
	)
	return root
}
