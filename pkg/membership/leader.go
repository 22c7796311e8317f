package membership

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// MoveLeader hands leadership to the named member and waits until it leads.
func MoveLeader(ctx context.Context, c *cluster.Cluster, to string) error {
	if _, err := c.Member(to); err != nil {
		return err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	target, _ := st.Member(to)
	switch {
	case !st.Cluster.Quorate || st.Cluster.Leader == "":
		return fmt.Errorf("cannot move leadership: the cluster has no leader: %s", st.Unhealthy())
	case st.Cluster.Leader == to:
		c.Progress.Say("%s is already the leader", to)
		return nil
	case target.Role == "learner":
		return fmt.Errorf("cannot move leadership to %s: it is a learner; it must be promoted first", to)
	case !target.Healthy:
		return fmt.Errorf("cannot move leadership to %s: it is not healthy: %s", to, target.LastError)
	}
	leader, _ := st.Member(st.Cluster.Leader)
	id, err := strconv.ParseUint(target.ID, 16, 64)
	if err != nil {
		return fmt.Errorf("member %s has no valid ID %q", to, target.ID)
	}
	// MoveLeader must be sent to the current leader.
	cli, err := c.Client(leader.ClientURLs...)
	if err != nil {
		return err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = cli.MoveLeader(mctx, id)
	cancel()
	if err != nil {
		return fmt.Errorf("move leadership from %s to %s: %w", leader.Name, to, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = cluster.Poll(wctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		// Ask the target itself: another member answering on its URL
		// would say who leads from its own view, not the target's.
		s, err := c.EndpointStatus(ctx, to, id, target.ClientURLs[0])
		if errors.Is(err, cluster.ErrWrongMember) {
			return false, err
		}
		return err == nil && s.Leader == id, nil
	})
	if err != nil {
		return fmt.Errorf("leadership did not move to %s: %w", to, err)
	}
	c.Progress.Say("leadership moved from %s to %s", leader.Name, to)
	return nil
}

func pickTransferee(st *cluster.Status, exclude string) string {
	best, bestIdx := "", uint64(0)
	for _, m := range st.Members {
		if m.Name == exclude || !m.Healthy || m.Role != "follower" || !m.InSpec {
			continue
		}
		if best == "" || m.RaftAppliedIndex > bestIdx {
			best, bestIdx = m.Name, m.RaftAppliedIndex
		}
	}
	return best
}
