package backup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Manifest authentication. Anyone who can write to the backup store (a
// bucket's other users, a shared directory) could otherwise forge a
// manifest: one that claims a revision far ahead stops the continuous loop
// from storing anything, one with a false range makes a restore drop real
// deltas, one naming another object makes garbage collection delete it.
// So every manifest carries an HMAC-SHA256, under the cluster backup key
// (DIR/pki/backup-auth.key, generated with the CA), of a canonical encoding
// of every field but the MAC itself: its ID, kind, cluster, revision range,
// sizes and the stored object's SHA-256 among them. The object's name is
// derived from the ID, so a manifest names exactly one object, and the
// object's SHA-256 binds its bytes. A manifest that is unauthenticated
// (written before the cluster had the key) or whose MAC does not verify is
// ignored and reported, never trusted.

// ManifestFormat is the format of authenticated manifests (Manifest.Format).
// Manifests without it were written before manifests were authenticated.
const ManifestFormat = 2

// AuthKey is the cluster backup key: it authenticates manifests.
type AuthKey struct {
	b [32]byte
}

// NewAuthKey makes a key from 32 bytes (tests, and keys derived elsewhere).
func NewAuthKey(b [32]byte) *AuthKey { return &AuthKey{b: b} }

// ID names the key without revealing it: the first 16 hex digits of the
// SHA-256 of its bytes with a domain prefix.
func (k *AuthKey) ID() string {
	s := sha256.Sum256(append([]byte("steward backup auth key\n"), k.b[:]...))
	return hex.EncodeToString(s[:8])
}

// LoadAuthKey reads the cluster backup key file (64 hex digits). The key
// is never logged.
func LoadAuthKey(path string) (*AuthKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster backup key: %w", err)
	}
	d, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(d) != 32 {
		return nil, fmt.Errorf("cluster backup key %s: want 64 hex digits", path)
	}
	var k AuthKey
	copy(k.b[:], d)
	return &k, nil
}

// Refusals of a manifest (errors.Is).
var (
	// ErrUnauthenticated: the manifest carries no MAC (written before the
	// cluster had its backup key). Trusted only when an operator asks.
	ErrUnauthenticated = errors.New("manifest is not authenticated")
	// ErrBadMAC: the MAC does not verify under the cluster backup key:
	// forged, modified, or written by another cluster.
	ErrBadMAC = errors.New("manifest authentication failed")
	// ErrUnknownKey: the manifest is authenticated under another key than
	// the one given (or none was given): it cannot be checked here. Like an
	// unauthenticated one, trusted only when an operator asks (a restore
	// on a machine that lost the cluster backup key).
	ErrUnknownKey = errors.New("manifest is authenticated under an unknown key")
	// ErrBadManifest: the manifest does not parse or contradicts itself.
	ErrBadManifest = errors.New("manifest is invalid")
)

// canonical is the byte string a MAC covers (a manifest's, a timeline
// record's, a commit marker's): a line naming what it is, then every field
// but the MAC, one name="value" line each (the value quoted, a number in
// decimal), in a fixed order. It does not depend on how the JSON was
// written. The bytes are a format: every object stored verifies only while
// they stay the same (TestMACsFixed).
type canonical struct{ b strings.Builder }

func newCanonical(what string) *canonical {
	c := &canonical{}
	c.b.WriteString(what + "\n")
	return c
}

func (c *canonical) f(name, v string) { c.b.WriteString(name + "=" + strconv.Quote(v) + "\n") }

func (c *canonical) i(name string, v int64) { c.f(name, strconv.FormatInt(v, 10)) }

func (c *canonical) bytes() []byte { return []byte(c.b.String()) }

// sum is the MAC under k of an object's canonical form.
func (k *AuthKey) sum(c *canonical) []byte {
	h := hmac.New(sha256.New, k.b[:])
	h.Write(c.bytes())
	return h.Sum(nil)
}

// canonicalManifest is the canonical form of a manifest.
func canonicalManifest(m *Manifest) *canonical {
	c := newCanonical("steward-manifest")
	f, i := c.f, c.i
	i("format", int64(m.Format))
	f("id", m.ID)
	f("kind", m.Kind)
	f("clusterID", m.ClusterID)
	f("member", m.Member)
	i("startRevision", m.StartRevision)
	i("endRevision", m.EndRevision)
	f("etcdVersion", m.EtcdVersion)
	i("size", m.Size)
	i("rawSize", m.RawSize)
	f("sha256", m.SHA256)
	i("snapshotHash", int64(m.SnapshotHash))
	i("totalKeys", int64(m.TotalKeys))
	f("compression", m.Compression)
	f("encryption", m.Encryption)
	f("keyID", m.KeyID)
	f("createdAt", m.CreatedAt.UTC().Format(time.RFC3339Nano))
	f("object", m.Object)
	f("macKeyID", m.MACKeyID)
	if m.CompactedFrom != "" {
		// Only when set, so manifests written before the field verify.
		f("compactedFrom", m.CompactedFrom)
	}
	if m.Lineage != (Lineage{}) {
		// Only when set, so manifests written before timelines verify
		// (they are of timeline 1).
		i("timeline", m.Timeline)
		i("parentTimeline", m.ParentTimeline)
		i("branchRevision", m.BranchRevision)
	}
	return c
}

func (k *AuthKey) mac(m *Manifest) []byte { return k.sum(canonicalManifest(m)) }

// Seal authenticates m under k (sets Format, MACKeyID and MAC).
func (k *AuthKey) Seal(m *Manifest) {
	m.Format, m.MACKeyID, m.MAC = ManifestFormat, k.ID(), ""
	m.MAC = hex.EncodeToString(k.mac(m))
}

var idPattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-(?:full-r([0-9]{1,19})|delta-r([0-9]{1,19})-([0-9]{1,19}))$`)

// ObjectName is the one name a zstd-compressed backup's object may have:
// derived from its ID, kind and whether it is encrypted.
func ObjectName(kind, id string, encrypted bool) string {
	return objectName(kind, id, true, encrypted)
}

// objectOf is the one name m's object may have (ObjectName; a full backup
// stored with compression "none" ends in .db, not .db.zst).
func objectOf(m *Manifest) string {
	return objectName(m.Kind, m.ID, m.Compression != CompressionNone, m.Encryption != "")
}

func objectName(kind, id string, zst, encrypted bool) string {
	ext := ".db"
	if kind == KindDelta {
		ext = ".delta"
	}
	if zst {
		ext += ".zst"
	}
	if encrypted {
		ext += ".enc"
	}
	return kind + "/" + id + ext
}

// checkManifest checks that a manifest agrees with itself: its ID is a
// backup ID of its kind and revisions, its object is the one its ID names,
// its ranges, sizes and digests are well formed.
func checkManifest(m *Manifest) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadManifest, fmt.Sprintf(format, a...))
	}
	g := idPattern.FindStringSubmatch(m.ID)
	if g == nil {
		return bad("id %q is not a backup ID", m.ID)
	}
	switch m.Kind {
	case KindFull:
		if g[1] == "" || g[1] != strconv.FormatInt(m.EndRevision, 10) {
			return bad("id %s does not name a full backup at revision %d", m.ID, m.EndRevision)
		}
	case KindDelta:
		if g[2] == "" || g[2] != strconv.FormatInt(m.StartRevision, 10) || g[3] != strconv.FormatInt(m.EndRevision, 10) {
			return bad("id %s does not name a delta of revisions %d to %d", m.ID, m.StartRevision, m.EndRevision)
		}
	default:
		return bad("unknown kind %q", m.Kind)
	}
	if m.StartRevision < 1 || m.EndRevision < m.StartRevision {
		return bad("revision range %d to %d", m.StartRevision, m.EndRevision)
	}
	if m.Size < 0 || m.RawSize < 0 {
		return bad("negative size")
	}
	if len(m.SHA256) != 64 {
		return bad("sha256 %q is not a SHA-256", m.SHA256)
	}
	if _, err := hex.DecodeString(m.SHA256); err != nil {
		return bad("sha256 %q is not hex", m.SHA256)
	}
	switch {
	case m.Compression == compressionZstd:
	case m.Compression == CompressionNone && m.Kind == KindFull:
		// A full backup stored as it is holds the database and etcd's
		// checksum: exactly its raw size, before encryption.
		if m.Encryption == "" && m.Size != m.RawSize {
			return bad("an object stored without compression of %d bytes, raw size %d", m.Size, m.RawSize)
		}
	default:
		return bad("compression %q", m.Compression)
	}
	if m.Encryption != "" && m.Encryption != encAlgorithm {
		return bad("encryption %q", m.Encryption)
	}
	if want := objectOf(m); m.Object != want {
		return bad("object %q is not the object of backup %s (%s)", m.Object, m.ID, want)
	}
	if m.CreatedAt.IsZero() {
		return bad("createdAt missing")
	}
	if f := idPattern.FindStringSubmatch(m.CompactedFrom); m.CompactedFrom != "" && (m.Kind != KindFull || f == nil || f[1] == "") {
		return bad("compactedFrom %q does not name a full backup", m.CompactedFrom)
	}
	if err := m.Lineage.check(); err != nil {
		return bad("%v", err)
	}
	return nil
}

// ParseManifest parses a stored manifest and checks it: that it agrees
// with itself (checkManifest) and that its MAC verifies under key. A
// manifest without a MAC is returned with ErrUnauthenticated, one under
// another key with ErrUnknownKey (the caller decides whether an operator
// asked to trust it); one whose MAC fails verification under key with
// ErrBadMAC and no manifest. It is a pure function of
// its input.
func ParseManifest(b []byte, key *AuthKey) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if err := checkManifest(&m); err != nil {
		return Manifest{}, err
	}
	if m.MAC == "" {
		if m.Format != 0 || m.MACKeyID != "" {
			return Manifest{}, fmt.Errorf("%w: format %d without a MAC", ErrBadMAC, m.Format)
		}
		return m, ErrUnauthenticated
	}
	if m.Format != ManifestFormat {
		return Manifest{}, fmt.Errorf("%w: unknown format %d", ErrBadMAC, m.Format)
	}
	if err := verifyMAC(key, m.MACKeyID, m.MAC, func(k *AuthKey) []byte { return k.mac(&m) }); err != nil {
		if errors.Is(err, ErrBadMAC) {
			return Manifest{}, err
		}
		return m, err
	}
	return m, nil
}

// verifyMAC checks an object sealed under the backup key keyID (a
// manifest, a timeline record or its commit marker) whose MAC is mac
// (hex), against the one key computes of its content (sum). ErrUnknownKey
// when there is no key or the object names another one (the object may
// still be described); ErrBadMAC when the MAC does not match (it must not
// be trusted at all).
func verifyMAC(key *AuthKey, keyID, mac string, sum func(*AuthKey) []byte) error {
	if key == nil {
		return fmt.Errorf("%w: no cluster backup key to check it with", ErrUnknownKey)
	}
	if keyID != key.ID() {
		return fmt.Errorf("%w: written under backup key %s, the cluster's is %s", ErrUnknownKey, keyID, key.ID())
	}
	got, err := hex.DecodeString(mac)
	if err != nil || !hmac.Equal(got, sum(key)) {
		return fmt.Errorf("%w: the MAC does not match its content (forged or modified)", ErrBadMAC)
	}
	return nil
}

// Authenticated reports whether m carries a MAC (ParseManifest verified it
// when m came from List).
func (m *Manifest) Authenticated() bool { return m.MAC != "" }
