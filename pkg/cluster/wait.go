package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// WaitMemberHealthy waits up to d until the named member answers and serves
// a linearizable read (a learner: knows a leader).
func (c *Cluster) WaitMemberHealthy(ctx context.Context, name string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	m, ok := c.Spec.Member(name)
	if !ok {
		return fmt.Errorf("member %s not in spec", name)
	}
	var lastErr error
	err := Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		p := c.probe(ctx, m.ClientURL)
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
func (c *Cluster) WaitQuorum(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return Poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := c.Status(ctx)
		return err == nil && st.Cluster.Quorate, nil
	})
}

// WaitHealthy polls until every spec member is healthy and returns the
// last status it read (the healthy one on success).
func (c *Cluster) WaitHealthy(ctx context.Context) (*Status, error) {
	var last *Status
	err := Poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := c.Status(ctx)
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

// Poll calls f every interval until it returns true, an error, or ctx ends.
func Poll(ctx context.Context, interval time.Duration, f func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := f(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// WaitCaughtUp waits, polling the status every interval until ctx ends,
// until member name is healthy (and, when pid is not 0, runs as pid),
// every member is healthy, and the member applied at least what the leader
// had applied when the member first answered. On timeout the error is the
// last condition that did not hold.
func (c *Cluster) WaitCaughtUp(ctx context.Context, name string, pid int, interval time.Duration) error {
	var target uint64
	last := ""
	err := Poll(ctx, interval, func(ctx context.Context) (bool, error) {
		st, err := c.Status(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ms, _ := st.Member(name)
		leader, _ := st.Member(st.Cluster.Leader)
		switch {
		case pid != 0 && ms.PID != pid:
			last = fmt.Sprintf("%s runs as pid %d, not the restarted %d", name, ms.PID, pid)
		case !ms.Healthy:
			last = fmt.Sprintf("%s not healthy: %s", name, ms.LastError)
		case st.Cluster.HealthyMembers < len(st.Members):
			last = "not every member is healthy: " + st.Unhealthy()
		case target == 0:
			target = leader.RaftAppliedIndex
			last = fmt.Sprintf("%s catching up to index %d", name, target)
		case ms.RaftAppliedIndex < target:
			last = fmt.Sprintf("%s applied %d of %d", name, ms.RaftAppliedIndex, target)
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return errors.New(last)
	}
	return nil
}
