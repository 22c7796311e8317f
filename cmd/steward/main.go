// Command steward is the etcd lifecycle manager: one binary for the CLI, the
// per-host agent and the embedded etcd server.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/cmd/steward/internal/command"
)

func main() {
	err := command.NewCommandFor(os.Args[0], os.Args[1:]).Execute()
	if err == nil {
		return
	}
	code := 1
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		code = ee.Code
		err = ee.Err
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", cli.LibraryAdvice(err))
	}
	os.Exit(code)
}
