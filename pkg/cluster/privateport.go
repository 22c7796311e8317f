package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/etcd-steward/steward/pkg/spec"
)

// PrivateClientURL is m's client URL with a free port no client knows, on
// the same host: the client listener of an isolated run (pkg/isolated), and of a learner
// until it votes (pkg/membership). Only a host's agent knows which of its
// ports are free, so a member on another host asks its agent.
func (c *Cluster) PrivateClientURL(ctx context.Context, m spec.Member) (string, error) {
	if !c.OnOtherHost(m) {
		return isolatedURL(m.ClientURL)
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return "", err
	}
	port, err := ac.FreePort(ctx, m.Name)
	if err != nil {
		return "", fmt.Errorf("a private client port for %s on host %s: %w", m.Name, m.Agent, err)
	}
	return withPort(m.ClientURL, port)
}

// isolatedURL is raw with a free port on the same host.
func isolatedURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse URL %q: %w", raw, err)
	}
	host := u.Hostname()
	port, err := spec.FreePort(host)()
	if err != nil {
		return "", err
	}
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u.String(), nil
}

// withPort is raw with another port.
func withPort(raw string, port int) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse URL %q: %w", raw, err)
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	return u.String(), nil
}
