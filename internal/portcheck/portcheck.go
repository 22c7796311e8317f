// Package portcheck tells whether a TCP address can be listened on, so a
// busy port is reported before anything starts instead of as a member that
// crash-loops.
package portcheck

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Free fails when another process already listens on hostPort.
func Free(hostPort string) error {
	l, err := net.Listen("tcp", hostPort)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("address %s is already in use by another process", hostPort)
		}
		return err
	}
	return l.Close()
}
