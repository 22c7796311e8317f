// Command steward is the etcd lifecycle manager: one binary for the CLI, the
// per-host agent and the embedded etcd server.
package main

import (
	"fmt"
	"os"

	"github.com/etcd-steward/steward/cmd/steward/internal/command"
)

func main() {
	if err := command.NewRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
