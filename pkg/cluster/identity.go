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
// The cluster ID is, in this order: the one recorded for this spec
// (KnownClusterID, seen on the live cluster) when a member's WAL records
// it too; the one every member's WAL that reads records, when they agree
// (the cluster as it ran last, should the record be stale); the recorded
// one; fallback (hex, the backup's; "" for none). Each member's ID is,
// in this order:
//
//   - the one its current data dir's WAL records, when that WAL is of the
//     chosen cluster (here, or through its agent: datadir.Finding). This
//     is the member as it ran last, after any add, replace or promotion;
//   - the one snap (the snapshot's members bucket) records under its name
//     (or, for a member added that never started and has no name there,
//     under its peer URL), when snapCluster (hex) is the chosen cluster:
//     "" for a snapshot that may be another cluster's (a snapshot file);
//   - none: derived from its peer URL and the token, which is the ID of a
//     member of the initial cluster.
//
// A member whose data dir cannot be read (its host unreachable) falls to
// the next source; IDs that two members would share are refused.
func (c *Cluster) KeptIdentity(ctx context.Context, fallback, snapCluster string, snap []datadir.SnapshotMember) (*datadir.Identity, error) {
	knownHex, err := c.KnownClusterID()
	if err != nil {
		return nil, err
	}
	known, _ := datadir.ParseID(knownHex)
	type walID struct{ member, cluster uint64 }
	wals := map[string]walID{}
	knownSeen, agree, first := false, true, uint64(0)
	for _, m := range c.Spec.Members {
		mid, cid := c.walIDs(ctx, m)
		if mid == 0 || cid == 0 {
			continue
		}
		wals[m.Name] = walID{mid, cid}
		knownSeen = knownSeen || cid == known
		if first == 0 {
			first = cid
		}
		agree = agree && cid == first
	}
	id := &datadir.Identity{Members: map[string]uint64{}}
	switch {
	case known != 0 && knownSeen:
		id.Cluster = known
	case len(wals) > 0 && agree:
		id.Cluster = first
	case known != 0:
		id.Cluster = known
	case fallback != "":
		if id.Cluster, err = datadir.ParseID(fallback); err != nil {
			return nil, fmt.Errorf("the backup's cluster ID: %w", err)
		}
	}
	if sc, err := datadir.ParseID(snapCluster); err != nil || sc != id.Cluster {
		snap = nil
	}
	owner := map[uint64]string{}
	for _, m := range c.Spec.Members {
		var v uint64
		if w, ok := wals[m.Name]; ok && w.cluster == id.Cluster {
			v = w.member
		}
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

// walIDs are the member and cluster IDs m's data dir's WAL records (here
// or through its agent), or zeros.
func (c *Cluster) walIDs(ctx context.Context, m spec.Member) (member, cluster uint64) {
	if !c.OnOtherHost(m) {
		v, vc, err := datadir.MemberID(datadir.WALDir(spec.Path(c.Dir, m.DataDir)))
		if err != nil {
			return 0, 0
		}
		return v, vc
	}
	f, err := c.CheckDataDir(ctx, m)
	if err != nil {
		return 0, 0
	}
	v, err1 := datadir.ParseID(f.MemberID)
	vc, err2 := datadir.ParseID(f.ClusterID)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	return v, vc
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
