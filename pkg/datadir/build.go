package datadir

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/config"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/pagecache"
)

// FromSnapshotOptions name the member a data dir is built for.
type FromSnapshotOptions struct {
	// Snapshot is an etcd database file. Its appended SHA-256, if any, is
	// cut off but not checked here: callers verify what they fetched first.
	Snapshot string
	// Name and PeerURL are the member's; InitialCluster and Token those of
	// the cluster it belongs to (they fix the member and cluster IDs).
	Name, PeerURL         string
	InitialCluster, Token string
	// IDs, when set, keeps a cluster's etcd IDs: the member ID of each
	// member of InitialCluster named in it, and the cluster ID (0: derived
	// from the member IDs, as etcd derives it at a bootstrap). A member
	// it does not name, or a nil IDs, gets the ID etcd derives for an
	// initial member (its peer URLs and Token), which is what a cluster
	// bootstrapped with InitialCluster has; a member added at run time
	// got another from etcd, which only IDs keeps.
	IDs *Identity
	// Move renames Snapshot into the data dir instead of copying it: for a
	// caller's own temporary file that no other member needs. Once moved,
	// it is gone (on a later failure, removed with the rest of out). A
	// data dir on another filesystem gets a copy, as without Move.
	Move bool
}

// FromSnapshot is the one place Steward stages a data dir from a snapshot:
// it writes a new data dir (0700) at out, which must not exist, holding
// what `etcdutl snapshot restore` (without a revision bump) writes: the
// database at member/snap/db with the membership buckets rewritten for the
// new cluster and the consistent index and term of the WAL's last entry,
// a WAL with one ConfChangeAddNode entry per member and a snapshot record,
// and the raft snapshot file of the membership.
//
// It does it without etcdutl's cost, which is what a restore pays when
// memory is tight: etcdutl copies the database (Move renames it instead)
// and opens it three times through etcd's backend, each open faulting the
// whole file into memory (MAP_POPULATE) and the later two walking every
// page to rebuild the freelist etcd does not sync. Here the database is
// opened once with plain bbolt (its synced freelist, when it has one, is
// read rather than rebuilt; when not, a sequential read runs ahead of the
// rebuild's walk), changed in one transaction, and the pages
// written are dropped from the page cache once on disk. On failure it
// removes what it wrote at out (its own output, never user data) and
// nothing else.
func FromSnapshot(o FromSnapshotOptions, out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("stage data dir for %s: %s already exists", o.Name, out)
	}
	err := fromSnapshot(o, out)
	if err != nil {
		_ = os.RemoveAll(out)
		return fmt.Errorf("stage data dir for %s in %s: %w", o.Name, out, err)
	}
	return nil
}

func fromSnapshot(o FromSnapshotOptions, out string) error {
	lg := zap.NewNop()
	pURLs, err := types.NewURLs([]string{o.PeerURL})
	if err != nil {
		return err
	}
	ics, err := types.NewURLsMap(o.InitialCluster)
	if err != nil {
		return err
	}
	// The checks etcdutl's restore makes: the member's URLs are its
	// entry of the initial cluster, no URL twice.
	srv := config.ServerConfig{Logger: lg, Name: o.Name, PeerURLs: pURLs, InitialPeerURLsMap: ics, InitialClusterToken: o.Token}
	if err := srv.VerifyBootstrap(); err != nil {
		return err
	}
	cl, err := membership.NewClusterFromURLsMap(lg, o.Token, ics)
	if err != nil {
		return err
	}
	if o.IDs != nil {
		if cl, err = o.IDs.apply(lg, cl); err != nil {
			return err
		}
	}
	self := cl.MemberByName(o.Name)
	if self == nil {
		return fmt.Errorf("member %s is not in the initial cluster %s", o.Name, o.InitialCluster)
	}
	snapDir := filepath.Join(out, "member", "snap")
	walDir := filepath.Join(out, "member", "wal")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(out, 0o700); err != nil {
		return err
	}
	db := filepath.Join(snapDir, "db")
	if err := placeDB(o.Snapshot, db, o.Move); err != nil {
		return err
	}
	// etcdutl's WAL: term 1, one entry per member (by ID), all committed.
	members := cl.Members()
	commit, term := uint64(len(members)), uint64(1)
	if err := rewriteMembership(db, members, commit, term); err != nil {
		return err
	}
	return saveWALAndSnap(lg, cl, self, walDir, snapDir, commit, term)
}

// placeDB puts the database src at dst, renamed (move) or copied, without
// an appended SHA-256 (a file whose size is 32 bytes past a multiple of
// 512, as etcdutl decides). A copy's pages are dropped from the page cache
// as it goes (the source's are left: the next member copies it again).
func placeDB(src, dst string, move bool) error {
	if move {
		err := os.Rename(src, dst)
		if err == nil {
			return truncateHash(dst)
		}
		if !errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("move the database into place: %w", err)
		}
		// The data dir is on another filesystem: copied instead (the
		// source is left to its owner).
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// Not read again here (etcd reads it when it starts).
	w := pagecache.NewWriter(out)
	w.Drop = true
	_, err = io.Copy(w, in)
	if serr := w.Sync(); err == nil {
		err = serr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy the database into place: %w", err)
	}
	return truncateHash(dst)
}

// truncateHash cuts the SHA-256 `etcdctl snapshot save` appends off path,
// when its size says it has one (etcdutl's hasChecksum).
func truncateHash(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size()%512 != sha256.Size {
		return nil
	}
	if err := os.Truncate(path, fi.Size()-sha256.Size); err != nil {
		return fmt.Errorf("cut the appended hash off the database: %w", err)
	}
	return nil
}

// rewriteMembership makes the database at path that of the new cluster, in
// one transaction, as etcdutl's restore does in three: it empties the
// members and members_removed buckets, saves each member as etcd does
// (key: its ID in hex; value: its JSON), and sets the consistent index and
// term. bbolt is opened with its defaults: no MAP_POPULATE (etcd's backend
// faults the whole file in), and the freelist is written back, so the next
// open (etcd's own) reads it instead of walking the database.
func rewriteMembership(path string, members []*membership.Member, index, term uint64) error {
	// Synced by Steward's own writes (deltas, revision bump); a member's
	// database (upgrade's replace) is not, and opening it walks every page.
	stop := pagecache.Prefetch(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	stop()
	if err != nil {
		return fmt.Errorf("open the database: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{schema.Members.Name(), schema.MembersRemoved.Name()} {
			if tx.Bucket(name) != nil {
				if err := tx.DeleteBucket(name); err != nil {
					return err
				}
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		mb := tx.Bucket(schema.Members.Name())
		for _, m := range members {
			v, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if err := mb.Put(schema.BackendMemberKey(m.ID), v); err != nil {
				return err
			}
		}
		meta, err := tx.CreateBucketIfNotExists(schema.Meta.Name())
		if err != nil {
			return err
		}
		if err := meta.Put(schema.MetaConsistentIndexKeyName, be64(index)); err != nil {
			return err
		}
		return meta.Put(schema.MetaTermKeyName, be64(term))
	})
	if err == nil {
		pagecache.DropFile(path) // bbolt synced on commit
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rewrite the membership of the database: %w", err)
	}
	return nil
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// saveWALAndSnap writes the WAL and raft snapshot of the new cluster as
// etcdutl's restore does (etcdutl/snapshot/v3_snapshot.go, saveWALAndSnap,
// Apache-2.0, The etcd Authors): metadata naming self and the cluster, one
// ConfChangeAddNode entry per member at term 1, the hard state (committed,
// voted for the first member), the snapshot file holding the membership in
// etcd's v2 form, and the WAL's snapshot record.
func saveWALAndSnap(lg *zap.Logger, cl *membership.RaftCluster, self *membership.Member, walDir, snapDir string, commit, term uint64) error {
	md, err := (&etcdserverpb.Metadata{NodeID: uint64(self.ID), ClusterID: uint64(cl.ID())}).Marshal()
	if err != nil {
		return err
	}
	w, err := wal.Create(lg, walDir, md)
	if err != nil {
		return fmt.Errorf("create the WAL: %w", err)
	}
	ids := cl.MemberIDs()
	ents := make([]raftpb.Entry, len(ids))
	voters := make([]uint64, len(ids))
	for i, id := range ids {
		ctx, err := json.Marshal(cl.Member(id))
		if err != nil {
			return errors.Join(err, w.Close())
		}
		d, err := (&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: uint64(id), Context: ctx}).Marshal()
		if err != nil {
			return errors.Join(err, w.Close())
		}
		ents[i] = raftpb.Entry{Type: raftpb.EntryConfChange, Term: term, Index: uint64(i + 1), Data: d}
		voters[i] = uint64(id)
	}
	if uint64(len(ents)) != commit {
		return errors.Join(fmt.Errorf("%d members, %d expected", len(ents), commit), w.Close())
	}
	if err := w.Save(raftpb.HardState{Term: term, Vote: voters[0], Commit: commit}, ents); err != nil {
		return errors.Join(fmt.Errorf("write the WAL: %w", err), w.Close())
	}
	confState := raftpb.ConfState{Voters: voters}
	raftSnap := raftpb.Snapshot{
		Data:     etcdserver.GetMembershipInfoInV2Format(lg, cl),
		Metadata: raftpb.SnapshotMetadata{Index: commit, Term: term, ConfState: confState},
	}
	if err := snap.New(lg, snapDir).SaveSnap(raftSnap); err != nil {
		return errors.Join(fmt.Errorf("write the raft snapshot: %w", err), w.Close())
	}
	if err := w.SaveSnapshot(walpb.Snapshot{Index: commit, Term: term, ConfState: &confState}); err != nil {
		return errors.Join(fmt.Errorf("write the WAL: %w", err), w.Close())
	}
	return w.Close()
}

// MoveAside renames a data dir (and its version record) to
// DIR.<why>-<timestamp>. It never deletes a data dir or the record of one.
// It returns "" when there was nothing to move.
//
// Invariant (a kill between its two renames loses nothing and the next
// call converges): the record moves first, then the dir. Killed between,
// DIR stays whole, without its record, and DIR.<why>-<timestamp>.version
// waits with no dir beside it (an interrupted move); the next MoveAside of
// DIR finds that record and finishes the move to that same name, so the
// copy has its record. The other order let the next call find a record
// with no dir at DIR's name and remove it (below), the copy losing its
// record. A record at DIR's name with no dir is a commit's (the agent's
// CommitDataDir puts a staged dir's record in place before the dir, for
// the same reason) that was killed before its dir followed: it names no
// data anyone has, and is removed.
func MoveAside(dataDir, why string) (string, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		if err := os.Remove(RecordPath(dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("remove the version record of %s, which has no data dir: %w", dataDir, err)
		}
		return "", nil
	}
	// An orphan copy record older than a whole copy is not an interrupted
	// move's (a copy removed by hand, or by an older Steward that removed
	// the dir first): taking its name would date the new copy before
	// older ones, and pruning, which keeps the newest, would remove it
	// first (interruptedAside).
	dst, err := interruptedAside(dataDir)
	if err != nil {
		return "", err
	}
	if dst == "" {
		dst = fmt.Sprintf("%s.%s-%s", dataDir, why, time.Now().UTC().Format(StampLayout))
	}
	// A record at DIR's name now is newer than an interrupted move's (that
	// one was moved away first): it replaces it.
	if err := os.Rename(RecordPath(dataDir), RecordPath(dst)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("move version record of %s aside: %w", dataDir, err)
	}
	crashpoint.Hit(crashpoint.DatadirAsideRecord)
	if err := os.Rename(dataDir, dst); err != nil {
		_ = os.Rename(RecordPath(dst), RecordPath(dataDir)) // back, if it went
		return "", fmt.Errorf("move data dir %s aside: %w", dataDir, err)
	}
	// Durable before the caller records what it did: a power loss must
	// not undo the renames.
	if err := syncDir(filepath.Dir(dataDir)); err != nil {
		return dst, fmt.Errorf("move data dir %s aside: %w", dataDir, err)
	}
	return dst, nil
}

// asideRecordName matches what follows "BASE." in the name of the version
// record of a copy MoveAside made: WHY-STAMP.version.
var asideRecordName = regexp.MustCompile(`^([a-z0-9-]+)-(\d{8}T\d{6}\.\d{3}Z)\.version$`)

// interruptedAside returns the copy name an interrupted MoveAside of
// dataDir was moving it to (the newest DATADIR.WHY-STAMP.version with no
// dir beside it, newer than every whole copy: an interrupted move is the
// last one begun), "" when none. A staged dir's name (KindRestoring) is
// never one: a data dir moved there would be removed as a restore's
// leftover.
func interruptedAside(dataDir string) (string, error) {
	parent, base := filepath.Split(dataDir)
	ents, err := os.ReadDir(filepath.Clean(parent))
	if err != nil {
		return "", err
	}
	var dst string
	var newest, newestWhole time.Time
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		m := asideRecordName.FindStringSubmatch(rest)
		if m == nil || m[1] == KindRestoring {
			continue
		}
		t, err := time.Parse(StampLayout, m[2])
		if err != nil {
			continue
		}
		copyDir := strings.TrimSuffix(filepath.Join(parent, e.Name()), ".version")
		if _, err := os.Lstat(copyDir); !errors.Is(err, os.ErrNotExist) {
			newestWhole = later(newestWhole, t) // a whole copy (or not ours to judge)
			continue
		}
		if dst == "" || t.After(newest) {
			dst, newest = copyDir, t
		}
	}
	if dst != "" && !newest.After(newestWhole) {
		return "", nil // older than a whole copy: not the last move begun
	}
	return dst, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// syncDir makes renames inside a directory durable (a variable so a test
// can see it called: the fsync itself is not observable).
var syncDir = atomicfile.SyncDir

// RequireEmpty fails when dir exists and holds anything.
func RequireEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("data dir %s already holds data; move it away first", dir)
	}
	return nil
}
