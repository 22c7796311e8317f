package datadir

import (
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"
)

// TestFromSnapshotKeepsIdentity: with IDs, every staged data dir records
// the member IDs and cluster ID given (WAL metadata, members bucket), a
// member IDs leaves out keeps etcd's derived ID, the snapshot's members
// read back; without IDs the IDs are etcd's derived ones.
func TestFromSnapshotKeepsIdentity(t *testing.T) {
	initial := "a=http://127.0.0.1:2380,b=http://127.0.0.1:2381,c=http://127.0.0.1:2382"
	peers := map[string]string{"a": "http://127.0.0.1:2380", "b": "http://127.0.0.1:2381", "c": "http://127.0.0.1:2382"}
	ics, _ := types.NewURLsMap(initial)
	derived, err := membership.NewClusterFromURLsMap(zap.NewNop(), "tok", ics)
	if err != nil {
		t.Fatal(err)
	}
	ids := &Identity{Members: map[string]uint64{"a": 0x1111, "b": 0x2222}, Cluster: 0xc1}
	dir := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		src := filepath.Join(dir, name+"-snapshot.db")
		makeEtcdDB(t, src)
		out := filepath.Join(dir, name)
		if err := FromSnapshot(FromSnapshotOptions{
			Snapshot: src, Name: name, PeerURL: peers[name], InitialCluster: initial, Token: "tok", IDs: ids,
		}, out); err != nil {
			t.Fatal(err)
		}
		mid, cid, err := MemberID(WALDir(out))
		if err != nil {
			t.Fatal(err)
		}
		want := ids.Members[name]
		if want == 0 {
			want = uint64(derived.MemberByName(name).ID)
		}
		if mid != want || cid != 0xc1 {
			t.Errorf("%s: WAL records member %x of cluster %x, want %x of c1", name, mid, cid, want)
		}
		f := Check(out)
		if f.MemberID != types.ID(want).String() || f.ClusterID != "c1" {
			t.Errorf("%s: Check says member %s of cluster %s", name, f.MemberID, f.ClusterID)
		}
		ms, err := SnapshotMembers(filepath.Join(out, "member", "snap", "db"))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, m := range ms {
			got[m.Name] = m.ID
		}
		if len(got) != 3 || got["a"] != 0x1111 || got["b"] != 0x2222 || got["c"] != uint64(derived.MemberByName("c").ID) {
			t.Errorf("%s: members bucket %v", name, got)
		}
	}

	// Without IDs: etcd's derived IDs, as etcdutl's restore writes them.
	out := filepath.Join(dir, "derived")
	src := filepath.Join(dir, "derived-snapshot.db")
	makeEtcdDB(t, src)
	if err := FromSnapshot(FromSnapshotOptions{Snapshot: src, Name: "a", PeerURL: peers["a"], InitialCluster: initial, Token: "tok"}, out); err != nil {
		t.Fatal(err)
	}
	if mid, cid, err := MemberID(WALDir(out)); err != nil || mid != uint64(derived.MemberByName("a").ID) || cid != uint64(derived.ID()) {
		t.Errorf("derived: member %x cluster %x (%v), want %x %x", mid, cid, err, derived.MemberByName("a").ID, derived.ID())
	}
	// DeriveClusterID is etcd's rule.
	if got := DeriveClusterID(derived.Members()); got != derived.ID() {
		t.Errorf("DeriveClusterID = %s, etcd derived %s", got, derived.ID())
	}

	// Two members with one ID are refused, and nothing is left.
	bad := filepath.Join(dir, "bad")
	makeEtcdDB(t, src+"2")
	err = FromSnapshot(FromSnapshotOptions{Snapshot: src + "2", Name: "a", PeerURL: peers["a"], InitialCluster: initial, Token: "tok",
		IDs: &Identity{Members: map[string]uint64{"a": 7, "b": 7}}}, bad)
	if err == nil || !strings.Contains(err.Error(), "both have ID 7") {
		t.Errorf("duplicate IDs: %v", err)
	}
	if f := Check(bad); f.State != Empty {
		t.Errorf("refused stage left %v", f)
	}
}

func TestParseIdentity(t *testing.T) {
	id, err := ParseIdentity(map[string]string{"a": "8e9e05c52164694d"}, "cdf818194e3a8c32")
	if err != nil || id.Members["a"] != 0x8e9e05c52164694d || id.Cluster != 0xcdf818194e3a8c32 {
		t.Fatalf("ParseIdentity: %+v %v", id, err)
	}
	if m, c := id.Hex(); m["a"] != "8e9e05c52164694d" || c != "cdf818194e3a8c32" {
		t.Errorf("Hex: %v %s", m, c)
	}
	if id, err := ParseIdentity(nil, ""); id != nil || err != nil {
		t.Errorf("nothing: %v %v", id, err)
	}
	for _, bad := range []string{"0", "xyz", ""} {
		if _, err := ParseIdentity(map[string]string{"a": bad}, ""); err == nil {
			t.Errorf("member ID %q accepted", bad)
		}
	}
}
