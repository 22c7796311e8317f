// Package rolling acts on a cluster's members one at a time: the leader last, each turn health-gated, leadership moved away from the member first, the member caught up before the next.
//
// # Where leadership goes
//
// Transferee is the one rule every operation uses to choose the member
// that takes leadership from one it is about to act on. A candidate is a
// healthy voting member of the spec (not a learner, not the member acted
// on). Among candidates, in this order:
//
//  1. a member the roll will not act on again ranks above one it will
//     (pending), and among pending members the one whose turn comes later
//     ranks higher: leadership handed to the next member acted on would
//     have to move again at once, so this makes one transfer per roll
//     (two at most when the leader changed since the roll was planned);
//  2. then the highest raft applied index: the most caught-up member
//     finishes the transfer soonest (etcd's MoveLeader waits until the
//     transferee has the leader's log), so proposals wait the least;
//  3. then the status order (member name), so that the same status always
//     gives the same choice.
//
// Operations that act on one member only (remove, replace, stop, adopt)
// have nothing pending and get the most caught-up healthy voter.
package rolling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/status"
)

// Transferee is the member that should take leadership from member from
// (the rule of the package doc), or "" when no member can. pending names
// the members the caller will act on after from, in turn order.
func Transferee(st *status.Status, from string, pending []string) string {
	turn := func(name string) int { // len(pending)+1 for a member not pending
		if i := slices.Index(pending, name); i >= 0 {
			return i
		}
		return len(pending) + 1
	}
	best, bestTurn, bestApplied := "", -1, uint64(0)
	for _, m := range st.Members {
		if m.Name == from || !m.Healthy || !m.InSpec || m.Role == "learner" || m.Role == "unknown" {
			continue
		}
		t := turn(m.Name)
		if best == "" || t > bestTurn || (t == bestTurn && m.RaftAppliedIndex > bestApplied) {
			best, bestTurn, bestApplied = m.Name, t, m.RaftAppliedIndex
		}
	}
	return best
}

// Order is names in their order with leader moved last (names without the
// leader are returned as they are).
func Order(names []string, leader string) []string {
	out := make([]string, 0, len(names))
	last := false
	for _, n := range names {
		if n == leader {
			last = true
			continue
		}
		out = append(out, n)
	}
	if last {
		out = append(out, leader)
	}
	return out
}

// Cluster is what a roll needs of a cluster: its status, and moving
// leadership (Of adapts a cluster handle).
type Cluster interface {
	Status(ctx context.Context) (*status.Status, error)
	MoveLeader(ctx context.Context, to string) error
}

// Of is c as a Cluster; MoveLeader is MoveLeader.
func Of(c *cluster.Cluster) Cluster { return handle{c} }

type handle struct{ c *cluster.Cluster }

func (h handle) Status(ctx context.Context) (*status.Status, error) { return status.Get(ctx, h.c) }
func (h handle) MoveLeader(ctx context.Context, to string) error    { return MoveLeader(ctx, h.c, to) }

// Action is what a roll does to each member.
type Action struct {
	// Gate runs on a fresh status before each member's turn and stops the
	// roll with its error (nil: no gate; the previous turn's CaughtUp,
	// status.CatchUp, already requires every member healthy).
	Gate func(st *status.Status, name string) error
	// KeepLeader leaves leadership where it is: for an action that does
	// not stop the member (defragmentation), whose raft loop keeps
	// heartbeating, so a transfer would only add an election's wait.
	KeepLeader bool
	// Act acts on the member; st is the status the turn began with.
	Act func(ctx context.Context, st *status.Status, name string) error
	// CaughtUp waits until the member is healthy and caught up again
	// (nil: no wait); status.WaitCaughtUp or a status.CatchUp gate.
	CaughtUp func(ctx context.Context, name string) error
	// Progress receives "  moved leadership from A to B" (may be nil).
	Progress progress.Func
}

// ErrNoTransferee: the member acted on leads and no other member can take
// over (Transferee found none).
var ErrNoTransferee = errors.New("no other healthy voting member can take over")

// Member is one member's turn: the gate on st (fetched when nil),
// leadership moved to Transferee(st, name, pending) when name leads
// (unless KeepLeader), the action, then the wait until it caught up.
func (a Action) Member(ctx context.Context, c Cluster, st *status.Status, name string, pending []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if st == nil {
		var err error
		if st, err = c.Status(ctx); err != nil {
			return err
		}
	}
	if a.Gate != nil {
		if err := a.Gate(st, name); err != nil {
			return err
		}
	}
	if !a.KeepLeader {
		if err := MoveAway(ctx, c, st, name, pending, a.Progress); err != nil {
			return err
		}
	}
	if a.Act != nil {
		if err := a.Act(ctx, st, name); err != nil {
			return err
		}
	}
	if a.CaughtUp != nil {
		return a.CaughtUp(ctx, name)
	}
	return nil
}

// MoveAway moves leadership from name to Transferee(st, name, pending)
// when name leads a cluster of more than one member, and says so.
func MoveAway(ctx context.Context, c Cluster, st *status.Status, name string, pending []string, say progress.Func) error {
	if st.Cluster.Leader != name || len(st.Members) < 2 {
		return nil
	}
	to := Transferee(st, name, pending)
	if to == "" {
		return fmt.Errorf("%s leads and %w", name, ErrNoTransferee)
	}
	if err := c.MoveLeader(ctx, to); err != nil {
		return err
	}
	say.Say("  moved leadership from %s to %s", name, to)
	return nil
}

// Each runs a's turn on every member of names (nil: every member of the
// status, in its order), the leader at the start last, and stops at the
// first error. Each turn after the first gates on a fresh status.
func (a Action) Each(ctx context.Context, c Cluster, names []string) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if names == nil {
		for _, m := range st.Members {
			names = append(names, m.Name)
		}
	}
	order := Order(names, st.Cluster.Leader)
	for i, name := range order {
		if i > 0 {
			st = nil
		}
		if err := a.Member(ctx, c, st, name, order[i+1:]); err != nil {
			return err
		}
	}
	return nil
}

// MoveLeader hands leadership to the named member and waits until it leads.
func MoveLeader(ctx context.Context, c *cluster.Cluster, to string) error {
	if _, err := c.Member(to); err != nil {
		return err
	}
	st, err := status.Get(ctx, c)
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
		s, err := status.Endpoint(ctx, c, to, id, target.ClientURLs[0])
		if errors.Is(err, status.ErrWrongMember) {
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
