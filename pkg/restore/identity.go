package restore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/memberrt"
)

// keptIdentity is the etcd IDs the restored data dirs keep
// (cluster.KeptIdentity): the snapshot's members count only when it is a
// backup of the cluster whose IDs are kept (a snapshot file, or another
// cluster's backup restored with AllowOtherCluster, may name other
// members).
func keptIdentity(ctx context.Context, c *cluster.Cluster, p prepared) (*datadir.Identity, error) {
	var snap []datadir.SnapshotMember
	if p.full.ID != "" && p.full.ClusterID != "" {
		var err error
		if snap, err = datadir.SnapshotMembers(p.snapshot); err != nil {
			return nil, err
		}
	}
	return c.KeptIdentity(ctx, p.full.ClusterID, p.full.ClusterID, snap)
}

// stageTarget is what each member's data dir is staged for: the spec's
// initial cluster and the IDs kept.
func stageTarget(c *cluster.Cluster, ids *datadir.Identity) memberrt.StageTarget {
	members, cid := ids.Hex()
	return memberrt.StageTarget{InitialCluster: c.Spec.InitialCluster(), MemberIDs: members, ClusterID: cid}
}

// describeIdentity says which IDs a restore keeps, for its progress.
func describeIdentity(ids *datadir.Identity) string {
	if ids == nil {
		return "member and cluster IDs derived from the spec's initial cluster (none recorded)"
	}
	members, cid := ids.Hex()
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(members)) {
		parts = append(parts, n+"="+members[n])
	}
	what := "cluster ID " + cid
	if cid == "" {
		what = "a cluster ID derived from its members"
	}
	if len(parts) == 0 {
		return fmt.Sprintf("keeping %s; member IDs derived from the spec's initial cluster", what)
	}
	return fmt.Sprintf("keeping %s and member IDs %s", what, strings.Join(parts, ", "))
}
