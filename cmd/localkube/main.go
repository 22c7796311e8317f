// Command localkube runs a local Kubernetes on this machine for Steward's
// tests and for trying Steward's operator, the way kind does
// (docs/kubernetes-local.md). Each subcommand is a thin layer over a
// library package: `localkube images` (images.go) over internal/kubeimages,
// `localkube up` and `down` (up.go, down.go) over internal/localkube.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "localkube",
		Short:         "A local Kubernetes built from source, for Steward's tests and demos",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newImagesCommand(), newUpCommand(), newDownCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "localkube:", err)
		stop()
		os.Exit(1)
	}
}
