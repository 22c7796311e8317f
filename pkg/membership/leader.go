package membership

import (
	"context"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// MoveLeader hands leadership to the named member and waits until it leads
// (rolling.MoveLeader).
func MoveLeader(ctx context.Context, c *cluster.Cluster, to string) error {
	return rolling.MoveLeader(ctx, c, to)
}

// pickTransferee is the member that takes leadership from exclude before
// it is removed, replaced or stopped: the one rule, rolling.Transferee,
// with nothing pending.
func pickTransferee(st *status.Status, exclude string) string {
	return rolling.Transferee(st, exclude, nil)
}
