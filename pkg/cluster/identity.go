package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/types"

	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// KeptIdentity returns the etcd IDs data dirs rebuilt for this spec's
// members keep (a restore, a recovery's seed, the upgrade by restore), so
// that the cluster ID and every member's ID stay what they were whatever
// membership changes happened at run time (datadir.Identity says why
// deriving them from the spec's initial cluster is not enough); nil when
// nothing is known and every ID is derived, as etcdutl's restore does.
//
// Invariant: every data dir of one rebuild gets the same identity (the
// caller computes it once and gives it to each), and no two members share
// an ID.
//
// The cluster ID is the one recorded for this spec (KnownClusterID, seen
// on the live cluster), else fallback (the backup's, hex; "" for none).
// Each member's ID is, in this order:
//
//   - the one its current data dir's WAL records, when that WAL is of the
//     same cluster (here, or through its agent: datadir.Finding). This is
//     the member as it ran last, after any add, replace or promotion;
//   - the one the snapshot's members bucket records under its name (or,
//     for a member added that never started and has no name there, under
//     its peer URL): snap is nil when the snapshot is not of this cluster
//     (a snapshot file, another cluster's backup);
//   - none: derived from its peer URL and the token, which is the ID of a
//     member of the initial cluster.
//
// A member whose data dir cannot be read (its host unreachable) falls to
// the next source; IDs that two members would share are refused.
func (c *Cluster) KeptIdentity(ctx context.Context, fallback string, snap []datadir.SnapshotMember) (*datadir.Identity, error) {
	cidHex, err := c.KnownClusterID()
	if err != nil {
		return nil, err
	}
	if cidHex == "" {
		cidHex = fallback
	}
	id := &datadir.Identity{Members: map[string]uint64{}}
	if cidHex != "" {
		if id.Cluster, err = datadir.ParseID(cidHex); err != nil {
			return nil, fmt.Errorf("the recorded cluster ID: %w", err)
		}
	}
	owner := map[uint64]string{}
	for _, m := range c.Spec.Members {
		v := c.walMemberID(ctx, m, id.Cluster)
		if v == 0 {
			v = snapshotMemberID(snap, m)
		}
		if v == 0 {
			continue
		}
		if other, dup := owner[v]; dup {
			return nil, fmt.Errorf("members %s and %s both had ID %s: keep neither by moving one's data dir aside first", other, m.Name, types.ID(v))
		}
		owner[v] = m.Name
		id.Members[m.Name] = v
	}
	if id.Cluster == 0 && len(id.Members) == 0 {
		return nil, nil
	}
	return id, nil
}

// walMemberID is the member ID m's data dir's WAL records when it is of
// cluster cid (any cluster when cid is 0), else 0.
func (c *Cluster) walMemberID(ctx context.Context, m spec.Member, cid uint64) uint64 {
	var mid, wcid string
	if c.OnOtherHost(m) {
		f, err := c.CheckDataDir(ctx, m)
		if err != nil {
			return 0
		}
		mid, wcid = f.MemberID, f.ClusterID
	} else {
		v, vc, err := datadir.MemberID(datadir.WALDir(spec.Path(c.Dir, m.DataDir)))
		if err != nil {
			return 0
		}
		mid, wcid = types.ID(v).String(), types.ID(vc).String()
	}
	v, err := datadir.ParseID(mid)
	if err != nil {
		return 0
	}
	if cid != 0 {
		if w, err := datadir.ParseID(wcid); err != nil || w != cid {
			return 0
		}
	}
	return v
}

// snapshotMemberID is the ID snap records for m: by name, or by peer URL
// for a member with no name there (added, never started); 0 when none.
func snapshotMemberID(snap []datadir.SnapshotMember, m spec.Member) uint64 {
	for _, s := range snap {
		if s.Name == m.Name {
			return s.ID
		}
	}
	for _, s := range snap {
		if s.Name == "" && slices.ContainsFunc(s.PeerURLs, func(u string) bool { return strings.EqualFold(u, m.PeerURL) }) {
			return s.ID
		}
	}
	return 0
}
