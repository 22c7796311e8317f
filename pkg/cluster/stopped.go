package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
)

// ErrStopped means the whole cluster is stopped: it runs on this machine
// alone, this machine's agent does not answer and no member accepts a
// connection on its client URL (after `steward down` or a reboot).
// Commands that need a running cluster refuse with it in one line instead
// of probing every member until their timeouts; commands that would start
// the members as a side effect (the agent starts the members it last ran)
// refuse with it too. The CLI adds the command that starts the cluster.
var ErrStopped = errors.New("cluster is stopped")

// stoppedDial bounds each member's TCP dial of the stopped check; the
// check dials every member at once, so it answers within about a second.
const stoppedDial = 300 * time.Millisecond

// Stopped reports whether the cluster is stopped (ErrStopped): it applies
// only to a cluster whose members all run under this machine's agent (not
// attached, no other hosts), and looks no further than the agent's socket
// and a TCP connect to each member's client URL.
func (c *Cluster) Stopped(ctx context.Context) bool {
	if c.Spec.IsExternal() || len(c.Spec.Members) == 0 {
		return false
	}
	if _, ok := c.Spec.Agent(spec.LocalAgent); !ok {
		return false
	}
	for _, a := range c.Spec.Agents {
		if a.Remote() {
			return false
		}
	}
	for _, m := range c.Spec.Members {
		if m.Agent != spec.LocalAgent {
			return false
		}
	}
	ac, err := c.Agent(spec.LocalAgent)
	if err != nil || ac.Ping(ctx, time.Second) == nil {
		return false
	}
	answers := make([]bool, len(c.Spec.Members))
	var wg sync.WaitGroup
	for i, m := range c.Spec.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = accepts(ctx, m.ClientURL)
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a {
			return false
		}
	}
	return true
}

// accepts reports whether something listens at the host and port of a
// client URL.
func accepts(ctx context.Context, raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	d := net.Dialer{Timeout: stoppedDial}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// RequireRunning refuses (ErrStopped) when the cluster is stopped; what
// is what the caller was about to do ("take a backup").
func (c *Cluster) RequireRunning(ctx context.Context, what string) error {
	if c.Stopped(ctx) {
		return c.StoppedError(what)
	}
	return nil
}

// StoppedError is the refusal of RequireRunning: what could not be done,
// and why, in one line; errors.Is(err, ErrStopped) holds.
func (c *Cluster) StoppedError(what string) error {
	return &stoppedError{what: what, name: c.Spec.Name, members: len(c.Spec.Members)}
}

type stoppedError struct {
	what, name string
	members    int
}

func (e *stoppedError) Error() string {
	msg := fmt.Sprintf("cluster %s is stopped (this machine's agent is not running and none of its %d members answers)", e.name, e.members)
	if e.what == "" {
		return msg
	}
	return "cannot " + e.what + ": " + msg
}

func (e *stoppedError) Is(target error) bool { return target == ErrStopped }
