package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Kinds of backup.
const (
	KindFull = "full"
)

// Manifest describes one backup. Its JSON field names are stable.
type Manifest struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// ClusterID is etcd's cluster ID (hex) of the cluster backed up.
	ClusterID string `json:"clusterID"`
	// Member is the name of the member the snapshot was streamed from.
	Member string `json:"member"`
	// StartRevision and EndRevision bound the revisions the backup holds. A
	// full snapshot holds the keyspace at EndRevision; StartRevision is its
	// compacted revision floor (1 when nothing was compacted).
	StartRevision int64  `json:"startRevision"`
	EndRevision   int64  `json:"endRevision"`
	EtcdVersion   string `json:"etcdVersion"`
	// Size is the stored object's size; RawSize the snapshot's.
	Size    int64 `json:"size"`
	RawSize int64 `json:"rawSize"`
	// SHA256 is of the stored object (after compression and encryption).
	SHA256 string `json:"sha256"`
	// SnapshotHash is etcd's hash of the keyspace (etcdutl snapshot status)
	// when it was computed (0: not computed; the SHA-256 protects the bytes).
	SnapshotHash uint32 `json:"snapshotHash,omitempty"`
	// TotalKeys is the number of events of a delta segment.
	TotalKeys   int    `json:"totalKeys,omitempty"`
	Compression string `json:"compression"`
	// Encryption is "aes-256-gcm" or ""; KeyID names the key.
	Encryption string    `json:"encryption,omitempty"`
	KeyID      string    `json:"keyID,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	// Object is the stored object's name in the store.
	Object string `json:"object"`
}

func manifestName(kind, id string) string { return kind + "/" + id + ".json" }

// NewID makes a backup ID that sorts by time: 20261121T130405.123Z-full-r42.
func NewID(kind string, t time.Time, rev int64) string {
	return fmt.Sprintf("%s-%s-r%d", t.UTC().Format("20060102T150405.000Z"), kind, rev)
}

// List returns every complete backup (one with a manifest), oldest first.
func List(ctx context.Context, s Store) ([]Manifest, error) {
	names, err := s.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list backups in %s: %w", s, err)
	}
	var out []Manifest
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		m, err := readManifest(ctx, s, n)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Find returns the manifest of a backup ID, or the newest full backup for
// "latest".
func Find(ctx context.Context, s Store, id string) (Manifest, error) {
	all, err := List(ctx, s)
	if err != nil {
		return Manifest{}, err
	}
	if id == "latest" || id == "" {
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Kind == KindFull {
				return all[i], nil
			}
		}
		return Manifest{}, fmt.Errorf("no full backup in %s: take one with `steward backup now`", s)
	}
	for _, m := range all {
		if m.ID == id {
			return m, nil
		}
	}
	var ids []string
	for _, m := range all {
		ids = append(ids, m.ID)
	}
	return Manifest{}, fmt.Errorf("no backup %q in %s (have: %s)", id, s, strings.Join(ids, ", "))
}

func readManifest(ctx context.Context, s Store, name string) (Manifest, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return Manifest{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("backup manifest %s is corrupt: %w", name, err)
	}
	if m.ID == "" || m.Object == "" || m.Kind == "" {
		return Manifest{}, fmt.Errorf("backup manifest %s is incomplete (id, kind or object missing)", name)
	}
	return m, nil
}
