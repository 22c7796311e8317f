package datadir

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
)

// Identity is the etcd IDs of a cluster, kept when its data dirs are
// rebuilt (a restore): the member ID of each member by name, and the
// cluster ID.
//
// etcd gives the members of an initial cluster IDs derived from their peer
// URLs and the initial cluster token, and the cluster the ID derived from
// those; a member added at run time (etcd's MemberAdd: `member add`,
// `replace`, a recovery's learners) gets an ID derived from the time too,
// and the cluster keeps its first ID whatever its members become. So a
// data dir rebuilt from the spec's initial cluster alone gets other IDs
// once the membership changed at run time: Identity carries the ones the
// cluster had.
type Identity struct {
	// Members maps member names to member IDs.
	Members map[string]uint64 `json:"members,omitempty"`
	// Cluster is the cluster ID; 0 derives it from the member IDs.
	Cluster uint64 `json:"cluster,omitempty"`
}

// apply gives the members of cl (as NewClusterFromURLsMap built it) the
// IDs id names, and the cluster id's cluster ID. Two members with one ID,
// or an ID of 0, are refused.
func (id *Identity) apply(lg *zap.Logger, cl *membership.RaftCluster) (*membership.RaftCluster, error) {
	var ms []*membership.Member
	seen := map[types.ID]string{}
	for _, m := range cl.Members() {
		m = m.Clone()
		if v, ok := id.Members[m.Name]; ok {
			if v == 0 {
				return nil, fmt.Errorf("member %s: 0 is not a member ID", m.Name)
			}
			m.ID = types.ID(v)
		}
		if other, dup := seen[m.ID]; dup {
			return nil, fmt.Errorf("members %s and %s would both have ID %s", other, m.Name, m.ID)
		}
		seen[m.ID] = m.Name
		ms = append(ms, m)
	}
	cid := types.ID(id.Cluster)
	if cid == 0 {
		cid = DeriveClusterID(ms)
	}
	return membership.NewClusterFromMembers(lg, cid, ms), nil
}

// DeriveClusterID is the cluster ID etcd gives a cluster bootstrapped with
// these members (membership.RaftCluster's genID): the first 8 bytes of the
// SHA-1 of their IDs, sorted, big-endian.
func DeriveClusterID(ms []*membership.Member) types.ID {
	ids := make([]types.ID, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	slices.Sort(ids)
	b := make([]byte, 8*len(ids))
	for i, v := range ids {
		binary.BigEndian.PutUint64(b[8*i:], uint64(v))
	}
	h := sha1.Sum(b)
	return types.ID(binary.BigEndian.Uint64(h[:8]))
}

// ParseID parses an etcd ID as etcd prints it (hex, as in `member list`
// and Steward's status): "8e9e05c52164694d".
func ParseID(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%q is not an etcd ID (hex, not 0)", s)
	}
	return v, nil
}

// ParseIdentity reads an Identity sent as etcd prints IDs (hex): member
// names to member IDs, and the cluster ID ("" derives it). Nothing set
// returns nil: every ID derived.
func ParseIdentity(members map[string]string, cluster string) (*Identity, error) {
	if len(members) == 0 && cluster == "" {
		return nil, nil
	}
	id := &Identity{Members: map[string]uint64{}}
	for name, s := range members {
		v, err := ParseID(s)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", name, err)
		}
		id.Members[name] = v
	}
	if cluster != "" {
		v, err := ParseID(cluster)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		id.Cluster = v
	}
	return id, nil
}

// Hex is id as etcd prints IDs (hex): member names to member IDs, and the
// cluster ID ("" when derived). A nil id gives nothing.
func (id *Identity) Hex() (members map[string]string, cluster string) {
	if id == nil {
		return nil, ""
	}
	if len(id.Members) > 0 {
		members = map[string]string{}
		for n, v := range id.Members {
			members[n] = types.ID(v).String()
		}
	}
	if id.Cluster != 0 {
		cluster = types.ID(id.Cluster).String()
	}
	return members, cluster
}

// SnapshotMember is a member an etcd database records (its members
// bucket, as etcd writes it: key the ID in hex, value the member's JSON).
type SnapshotMember struct {
	ID       uint64
	Name     string // "" for a member added that never started
	PeerURLs []string
}

// SnapshotMembers reads the members an etcd database records, opened
// read-only.
func SnapshotMembers(path string) ([]SnapshotMember, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("read the members of %s: %w", path, err)
	}
	defer db.Close()
	var out []SnapshotMember
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Members.Name())
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var m membership.Member
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s: %w", k, err)
			}
			if m.ID == 0 {
				id, err := ParseID(string(k))
				if err != nil {
					return err
				}
				m.ID = types.ID(id)
			}
			out = append(out, SnapshotMember{ID: uint64(m.ID), Name: m.Name, PeerURLs: m.PeerURLs})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read the members of %s: %w", path, err)
	}
	return out, nil
}
