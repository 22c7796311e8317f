package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/internal/proc"
)

func newDownCommand() *cobra.Command {
	var dir string
	var keep bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove a local Kubernetes that localkube up started, and its directory",
		Long: `Stop the supervisor localkube up left running (SIGTERM: it kills the
cluster's processes and removes its network namespaces, veths, bridge and
cgroups), then remove the cluster's directory. A cluster whose supervisor
is gone (killed) is removed from the names it left (lk<PID>...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				src, err := sourceDir(cmd.Context())
				if err != nil {
					return err
				}
				dir = filepath.Join(src, ".cache", "localkube")
			}
			s, err := localkube.ReadState(dir)
			if errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(cmd.ErrOrStderr(), "localkube: no cluster in %s\n", dir)
				return nil
			}
			if err != nil {
				return err
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if proc.Alive(s.Owner) && !isSupervisor(proc.Cmdline(s.Owner), abs) {
				// The supervisor is gone and its PID reused: signal nobody.
				fmt.Fprintf(cmd.ErrOrStderr(), "localkube: PID %d is not the supervisor of %s (gone, its PID reused): not signalled\n", s.Owner, abs)
			} else if proc.Alive(s.Owner) {
				if err := syscall.Kill(s.Owner, syscall.SIGTERM); err != nil {
					return fmt.Errorf("stop the supervisor (PID %d): %w", s.Owner, err)
				}
				deadline := time.Now().Add(60 * time.Second)
				for proc.Alive(s.Owner) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if proc.Alive(s.Owner) {
					_ = syscall.Kill(s.Owner, syscall.SIGKILL)
				}
			}
			// What the supervisor did not remove (it was killed, or failed).
			if _, err := localkube.RemoveOwned(s.Owner); err != nil {
				return fmt.Errorf("remove the cluster of supervisor PID %d: %w", s.Owner, err)
			}
			if keep {
				fmt.Fprintf(cmd.ErrOrStderr(), "localkube: cluster removed; %s kept\n", dir)
				return nil
			}
			if err := localkube.RemoveDir(dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "localkube: cluster and %s removed\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the cluster's directory (default SOURCE/.cache/localkube)")
	cmd.Flags().BoolVar(&keep, "keep-dir", false, "keep the directory (logs, certificates) after removing the cluster")
	return cmd
}

// isSupervisor says whether argv (a process's arguments, proc.Cmdline) is that of the
// supervisor `localkube up` leaves running for the cluster directory dir
// (absolute): `... up --supervise --dir DIR ...`. A cluster.json whose
// supervisor is gone names a PID the kernel may have given to anything.
func isSupervisor(argv []string, dir string) bool {
	if len(argv) < 5 || argv[1] != "up" || argv[2] != "--supervise" {
		return false
	}
	for i := 3; i+1 < len(argv); i++ {
		if argv[i] == "--dir" {
			return filepath.Clean(argv[i+1]) == filepath.Clean(dir)
		}
	}
	return false
}
