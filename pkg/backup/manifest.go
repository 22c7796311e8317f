package backup

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/editdist"
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
	// Object is the stored object's name in the store (ObjectName: derived
	// from the ID).
	Object string `json:"object"`
	// CompactedFrom is, for a full backup folded from a chain (Compact),
	// the ID of the full backup the chain started from ("" for a snapshot
	// of a member).
	CompactedFrom string `json:"compactedFrom,omitempty"`
	// Lineage is the timeline the backup belongs to (timeline.go); a
	// manifest without it is of timeline 1.
	Lineage
	// Format is ManifestFormat for an authenticated manifest, 0 for one
	// written before manifests were authenticated.
	Format int `json:"format,omitempty"`
	// MACKeyID names the cluster backup key (AuthKey.ID) and MAC is the
	// HMAC-SHA256 of the canonical encoding of every other field (auth.go).
	MACKeyID string `json:"macKeyID,omitempty"`
	MAC      string `json:"mac,omitempty"`
}

// encAlgorithm is the one encryption a manifest may name.
const encAlgorithm = "aes-256-gcm"

func manifestName(kind, id string) string { return kind + "/" + id + ".json" }

// NewID makes a backup ID that sorts by time: 20261121T130405.123Z-full-r42.
func NewID(kind string, t time.Time, rev int64) string {
	return fmt.Sprintf("%s-%s-r%d", t.UTC().Format("20060102T150405.000Z"), kind, rev)
}

// ListOptions say which manifests List trusts.
type ListOptions struct {
	// Key is the cluster backup key; without it no manifest is trusted.
	Key *AuthKey
	// AllowUnauthenticated also trusts manifests without a MAC (written
	// before the cluster had its backup key) and manifests authenticated
	// under another key (a machine that lost the cluster's key). Never one
	// whose MAC fails under Key. Only an operator's explicit
	// choice sets it; the continuous loop and garbage collection never do.
	AllowUnauthenticated bool
}

// Ignored is a manifest List did not trust, and why.
type Ignored struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Err is the refusal (errors.Is: ErrUnauthenticated, ErrBadMAC,
	// ErrBadManifest), or the error reading it.
	Err error `json:"-"`
}

func (i Ignored) String() string { return i.Name + ": " + i.Reason }

// Listing is what List found: the trusted backups, oldest first, and the
// manifests it ignored.
type Listing struct {
	Backups []Manifest
	Ignored []Ignored
}

// ErrNoFullBackup: the store holds no (trusted) full backup to start from.
var ErrNoFullBackup = errors.New("no full backup")

// Find returns the backup with an ID, or the newest full backup for
// "latest" (or ""; ErrNoFullBackup without one).
func (l Listing) Find(id, store string) (Manifest, error) {
	if id == "latest" || id == "" {
		for i := len(l.Backups) - 1; i >= 0; i-- {
			if l.Backups[i].Kind == KindFull {
				return l.Backups[i], nil
			}
		}
		return Manifest{}, fmt.Errorf("%w in %s%s", ErrNoFullBackup, store, l.ignoredNote())
	}
	for _, m := range l.Backups {
		if m.ID == id {
			return m, nil
		}
	}
	var ids []string
	for _, m := range l.Backups {
		ids = append(ids, m.ID)
	}
	if len(ids) == 0 {
		return Manifest{}, fmt.Errorf("%w: no backup %q in %s: it holds none%s", ErrUnknownBackup, id, store, l.ignoredNote())
	}
	return Manifest{}, &unknownBackup{msg: fmt.Sprintf("no backup %q in %s: it holds %d, the nearest %s%s",
		id, store, len(ids), strings.Join(Nearest(id, ids, nearestShown), ", "), l.ignoredNote())}
}

// ErrUnknownBackup: Find found no backup of the ID asked for. Its message
// counts the backups and names the few nearest IDs, never the whole list
// (a store holds hundreds); commands add the one that lists them.
var ErrUnknownBackup = errors.New("no such backup")

type unknownBackup struct{ msg string }

func (e *unknownBackup) Error() string        { return e.msg }
func (e *unknownBackup) Is(target error) bool { return target == ErrUnknownBackup }

// nearestShown is how many IDs an unknown ID's refusal names.
const nearestShown = 3

// Nearest returns up to n of ids nearest to id: the fewest single-byte
// edits (Levenshtein distance) first, ties in the order given.
func Nearest(id string, ids []string, n int) []string {
	type cand struct {
		id   string
		dist int
	}
	cs := make([]cand, len(ids))
	for i, x := range ids {
		cs[i] = cand{x, editdist.Distance(id, x)}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].dist < cs[j].dist })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].id)
	}
	return out
}

// ignoredNote says what was ignored, for an error message.
func (l Listing) ignoredNote() string {
	if len(l.Ignored) == 0 {
		return ""
	}
	var s []string
	for _, i := range l.Ignored {
		s = append(s, i.String())
	}
	return fmt.Sprintf(" (ignored %d manifests: %s)", len(l.Ignored), strings.Join(s, "; "))
}

// List returns every complete backup (one with a manifest) whose manifest
// verifies, oldest first, and the manifests it ignored: unreadable,
// corrupt, self-contradictory, unauthenticated (unless
// o.AllowUnauthenticated) or failing authentication. One bad manifest never
// hides the others. Only a failure to list the store is an error.
func List(ctx context.Context, s Store, o ListOptions) (Listing, error) {
	names, err := s.List(ctx, "")
	if err != nil {
		return Listing{}, fmt.Errorf("list backups in %s: %w", s, err)
	}
	var out Listing
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") || !(strings.HasPrefix(n, KindFull+"/") || strings.HasPrefix(n, KindDelta+"/")) {
			continue
		}
		m, err := readManifest(ctx, s, n, o.Key)
		if (errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrUnknownKey)) && o.AllowUnauthenticated {
			err = nil
		}
		if err == nil && manifestName(m.Kind, m.ID) != n {
			err = fmt.Errorf("%w: stored as %s, but it describes backup %s", ErrBadManifest, n, m.ID)
		}
		if err != nil {
			reason := err.Error()
			switch {
			case errors.Is(err, ErrUnauthenticated):
				reason += " (written before the cluster had its backup key; restore it only deliberately)"
			case errors.Is(err, ErrUnknownKey):
				reason += " (another cluster's, or this machine lacks the cluster's backup key; restore it only deliberately)"
			}
			out.Ignored = append(out.Ignored, Ignored{Name: n, Reason: reason, Err: err})
			continue
		}
		out.Backups = append(out.Backups, m)
	}
	sort.Slice(out.Backups, func(i, j int) bool { return out.Backups[i].ID < out.Backups[j].ID })
	return out, nil
}

// Find returns the manifest of a trusted backup ID, or the newest full
// backup for "latest".
func Find(ctx context.Context, s Store, o ListOptions, id string) (Manifest, error) {
	l, err := List(ctx, s, o)
	if err != nil {
		return Manifest{}, err
	}
	return l.Find(id, s.String())
}

// maxManifestBytes bounds what is read of a manifest object.
const maxManifestBytes = 1 << 20

func readManifest(ctx context.Context, s Store, name string, key *AuthKey) (Manifest, error) {
	b, err := readAll(ctx, s, name)
	if err != nil {
		return Manifest{}, err
	}
	return ParseManifest(b, key)
}
