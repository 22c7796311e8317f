// Package agent is the `steward agent` command: the per-host agent in the
// foreground. `steward up` starts one in the background.
package agent

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	agentpkg "github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/recovery"
)

// NewCommand returns the agent command.
func NewCommand(g *cli.Globals) *cobra.Command {
	var name, socket string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the per-host agent that supervises this host's etcd members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := g.StewardDir()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// The continuous backup loop runs beside the supervisor; it acts
			// only while this agent runs the etcd leader.
			bctx, bcancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					recovery.RunAuto(bctx, dir, name, log.With("component", "recovery"))
				}()
				backupd.Run(bctx, dir, name, log.With("component", "backup"))
				wg.Wait()
			}()
			stopBackups := sync.OnceFunc(func() { bcancel(); <-done })
			defer stopBackups()
			err = agentpkg.New(agentpkg.Options{
				Name: name, Dir: dir, Socket: socket, Log: log,
				BeforeStop:   stopBackups,
				NewestBackup: func() int64 { return backup.NewestBackedUpRevision(filepath.Join(dir, "status")) },
			}).Run(ctx)
			return cli.Hint(err, agentpkg.ErrSocketPathTooLong, "use a shorter --dir or --socket")
		},
	}
	cmd.Flags().StringVar(&name, "name", "local", "agent name, as in the cluster spec's agents list")
	cmd.Flags().StringVar(&socket, "socket", "", "Unix socket of the API (default DIR/run/agent.sock; DIR/run/agent-NAME.sock for other names)")
	return cmd
}
