package backup

import (
	"encoding/hex"
	"testing"
	"time"
)

// TestMACsFixed: the MACs a sealed manifest, timeline record and commit
// marker carry are those of their fixed canonical forms, byte for byte:
// every backup and timeline already stored verifies only while they stay
// so (a change of the encoding is a change of format).
func TestMACsFixed(t *testing.T) {
	var kb [32]byte
	for i := range kb {
		kb[i] = byte(i)
	}
	k := NewAuthKey(kb)
	at := time.Date(2026, 11, 28, 7, 0, 0, 123456789, time.UTC)
	lin := Lineage{Timeline: 3, ParentTimeline: 2, BranchRevision: 41}
	m := Manifest{ID: "20261128T070000.123Z-full-r42", Kind: "full", ClusterID: "feed", Member: "etcd-1", StartRevision: 1, EndRevision: 42,
		EtcdVersion: "3.6.16", Size: 1000, RawSize: 4000, SHA256: "ab", SnapshotHash: 7, TotalKeys: 9, Compression: "zstd",
		Encryption: "aes-256-gcm", KeyID: "k1", CreatedAt: at, Object: "o\n\"x\"", CompactedFrom: "c1", Lineage: lin}
	k.Seal(&m)
	bare := Manifest{ID: "x", Kind: "delta", CreatedAt: at}
	k.Seal(&bare)
	r := TimelineRecord{Lineage: lin, StartRevision: 1000, ClusterID: "feed", Source: "snapshot file", CreatedAt: at}
	k.SealTimeline(&r)
	c := TimelineCommit{Format: ManifestFormat, Timeline: 3, StartRevision: 1000, RecordMAC: r.MAC, CommittedAt: at, MACKeyID: k.ID()}
	for _, tc := range []struct{ name, got, want string }{
		{"manifest", m.MAC, "5201fc6f97f2ae0299d3de2f07dde2a44b5fe7600cb9fe49e156281cf9ebfef8"},
		{"manifest without the later fields", bare.MAC, "cf893af6ad8e59de532fb477e0f66bb4719fac788af4fb414beeb01bb8c370b3"},
		{"timeline record", r.MAC, "e72cc7df02f0c3e364a8afa69f8ede4723dda2f46798a41b17a8ed921192a96f"},
		{"commit marker", hex.EncodeToString(k.commitMAC(&c)), "3efe9a0c3d1b3e91da5be69d4bd2ea76881ae48466f2825f739dd0560977f9fe"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: MAC %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}
