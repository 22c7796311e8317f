// Package command assembles the steward command tree. Each command lives in its
// own package under internal/cmd and is a thin layer over a library package.
package command

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/adopt"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/agent"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/alarm"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/attach"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/backup"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/binaries"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/certs"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/defrag"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/down"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/env"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/etcd"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/etcdctl"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/host"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/initcluster"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/inspect"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/kube"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/leader"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/member"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/migrate"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/operator"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/plan"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/recovery"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/restore"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/rollback"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/status"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/takeover"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/up"
	"github.com/etcd-steward/steward/cmd/steward/internal/command/upgrade"
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
	// --cpu-profile FILE (hidden): a Go CPU profile of the whole command,
	// for the benchmarks' "where the time goes" (docs/benchmarks.md), not
	// for operations.
	var profile string
	var stopProfile func()
	root.PersistentFlags().StringVar(&profile, "cpu-profile", "", "write a Go CPU profile (pprof) of the command to this file")
	_ = root.PersistentFlags().MarkHidden("cpu-profile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if profile == "" {
			return nil
		}
		var err error
		stopProfile, err = cli.StartCPUProfile(profile)
		return err
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		if stopProfile != nil {
			stopProfile()
		}
	}
	// A flag error for the output format spelled as its own flag
	// (--json, as kubectl users type it) names -o.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return outputFlagHint(err) })
	root.AddCommand(
		initcluster.NewCommand(g),
		up.NewCommand(g),
		attach.NewCommand(g),
		down.NewCommand(g),
		env.NewCommand(g),
		etcdctl.NewCommand(g),
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
		kube.NewCommand(g),
		agent.NewCommand(g),
		host.NewCommand(g),
		takeover.NewCommand(g),
		adopt.NewCommand(g),
		binaries.NewCommand(g),
		certs.NewCommand(g),
		operator.NewCommand(g),
		etcd.NewCommand(),
	)
	return root
}

// outputFlagHint adds to cobra's "unknown flag: --json" (--yaml, --table)
// the flag that selects the output format.
func outputFlagHint(err error) error {
	for _, f := range []string{"json", "yaml", "table"} {
		if msg := err.Error(); msg == "unknown flag: --"+f || strings.HasPrefix(msg, "unknown flag: --"+f+"=") {
			return fmt.Errorf("%w: the output format is -o %s (--output %s)", err, f, f)
		}
	}
	return err
}
