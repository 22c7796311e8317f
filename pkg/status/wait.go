package status

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// WaitMemberHealthy waits up to d until the named member answers and serves
// a linearizable read (a learner: knows a leader).
func WaitMemberHealthy(ctx context.Context, c *cluster.Cluster, name string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	m, ok := c.Spec.Member(name)
	if !ok {
		return fmt.Errorf("member %s not in spec", name)
	}
	var lastErr error
	err := cluster.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		p := probeEndpoint(ctx, c, m.ClientURL)
		if p.err == nil && p.readErr == nil {
			return true, nil
		}
		lastErr = p.readErr
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("member %s not healthy within %s: %v", name, d, lastErr)
	}
	return nil
}

// WaitQuorum waits up to d until a linearizable read succeeds.
func WaitQuorum(ctx context.Context, c *cluster.Cluster, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cluster.Poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := Get(ctx, c)
		return err == nil && st.Cluster.Quorate, nil
	})
}

// WaitHealthy polls until every spec member is healthy and returns the
// last status it read (the healthy one on success).
func WaitHealthy(ctx context.Context, c *cluster.Cluster) (*Status, error) {
	var last *Status
	err := cluster.Poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := Get(ctx, c)
		if err != nil {
			return false, err
		}
		last = st
		if st.Cluster.Quorate && st.Cluster.HealthyMembers == len(st.Members) {
			return true, nil
		}
		// A member that cannot start will not fix itself: say so now.
		for _, m := range st.Members {
			if m.Process == agentapi.StateFailed || m.Process == agentapi.StateCrashLoop {
				return false, fmt.Errorf("member %s cannot run: %s (log: %s)", m.Name, m.LastError,
					filepath.Join(c.Dir, "logs", m.Name+".log"))
			}
		}
		return false, nil
	})
	if err != nil && last != nil && errors.Is(err, context.DeadlineExceeded) {
		return last, fmt.Errorf("cluster not healthy in time: %s", unhealthySummary(last))
	}
	return last, err
}

// CatchUp is the health gate after a member (re)starts: the member is
// healthy (running Version and as PID when set), every member is healthy,
// and the member has applied at least what the leader had applied when the
// member first answered. One CatchUp follows one restart: it remembers that
// target between checks.
type CatchUp struct {
	Name    string
	Version string // "" for any
	PID     int    // 0 for any
	target  uint64 // owned by the polling goroutine
}

// Check returns the first condition of the gate that st does not meet, or
// "" when all are met.
func (g *CatchUp) Check(st *Status) string {
	ms, _ := st.Member(g.Name)
	leader, _ := st.Member(st.Cluster.Leader)
	switch {
	case g.Version != "" && ms.Version != g.Version:
		return fmt.Sprintf("%s reports version %q", g.Name, ms.Version)
	case g.PID != 0 && ms.PID != g.PID:
		return fmt.Sprintf("%s runs as pid %d, not the restarted %d", g.Name, ms.PID, g.PID)
	case !ms.Healthy:
		return fmt.Sprintf("%s not healthy: %s", g.Name, ms.LastError)
	case st.Cluster.HealthyMembers < len(st.Members):
		return "not every member is healthy: " + st.Unhealthy()
	case g.target == 0:
		// The leader's applied index once the member answers: the member
		// has caught up when it applied as much.
		g.target = leader.RaftAppliedIndex
		return fmt.Sprintf("%s catching up to index %d", g.Name, g.target)
	case ms.RaftAppliedIndex < g.target:
		return fmt.Sprintf("%s applied %d of %d", g.Name, ms.RaftAppliedIndex, g.target)
	}
	return ""
}

// WaitCaughtUp waits, polling the status every interval until ctx ends,
// until member name passes the CatchUp gate (running as pid when pid is
// not 0). On timeout the error is the last condition that did not hold.
func WaitCaughtUp(ctx context.Context, c *cluster.Cluster, name string, pid int, interval time.Duration) error {
	g := &CatchUp{Name: name, PID: pid}
	last := ""
	err := cluster.Poll(ctx, interval, func(ctx context.Context) (bool, error) {
		st, err := Get(ctx, c)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = g.Check(st)
		return last == "", nil
	})
	if err != nil {
		return errors.New(last)
	}
	return nil
}
