package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/internal/scratch"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Restores of members on this host: the coordinator prepares the snapshot
// (full backup, deltas replayed, revision bumped) and sends it; the agent
// stages a data dir from it beside the member's (datadir.FromSnapshot, the
// one place), and commits it on a second request, once every member of
// the restore is staged. Nothing a user owns changes before the commit,
// which moves the old data dir aside (never deletes it).

// stagedSuffix begins the name of a data dir staged beside the member's.
const stagedSuffix = ".restoring-"

// FreePort picks a free TCP port on this host's address of the member (a
// private client port for an isolated run).
func (a *Agent) FreePort(name string) (int, error) {
	m, ok := a.member(name)
	if !ok {
		return 0, errNotFound(name)
	}
	m.mu.Lock()
	raw := m.cfg.ClientURL
	m.mu.Unlock()
	hp, err := spec.HostPort(raw)
	if err != nil {
		return 0, err
	}
	host := hp
	if i := strings.LastIndex(hp, ":"); i >= 0 {
		host = strings.Trim(hp[:i], "[]")
	}
	return spec.FreePort(host)()
}

// StageDataDir reads a snapshot from r (checked against sha256Hex), and
// stages a data dir for the stopped member name from it, beside its data
// dir; it returns the staged dir.
func (a *Agent) StageDataDir(ctx context.Context, name string, req agentapi.StageRequest, r io.Reader) (string, error) {
	cfg, err := a.stoppedConfig(name, "restoring its data dir")
	if err != nil {
		return "", err
	}
	if req.InitialCluster == "" || len(req.SHA256) != 64 {
		return "", badRequest{fmt.Errorf("stage request for %s: initialCluster and the snapshot's sha256 are required", name)}
	}
	ids, err := datadir.ParseIdentity(req.MemberIDs, req.ClusterID)
	if err != nil {
		return "", badRequest{fmt.Errorf("stage request for %s: %w", name, err)}
	}
	if req.Version != "" {
		if v, err := binaries.NormalizeVersion(req.Version); err != nil || v != req.Version {
			return "", badRequest{fmt.Errorf("stage request for %s: version record %q: want an etcd version such as 3.6.4", name, req.Version)}
		}
	}
	// Held while it stages; a killed stage's copy is swept by the next.
	sd, err := scratch.New(a.opts.Dir, "tmp-stage-")
	if err != nil {
		return "", err
	}
	defer sd.Remove()
	snap := filepath.Join(sd.Path, "snapshot.db")
	f, err := os.OpenFile(snap, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("receive the snapshot for %s: %w", name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != req.SHA256 {
		return "", badRequest{fmt.Errorf("the snapshot for %s arrived with sha256 %s, not %s: nothing was staged", name, got, req.SHA256)}
	}
	crashpoint.Hit(crashpoint.AgentStageReceived)
	if err := os.MkdirAll(filepath.Dir(cfg.DataDir), 0o700); err != nil {
		return "", err
	}
	// What an earlier restore staged for this member and never put in
	// place (killed): its own output, never user data. A stage request
	// comes from a restore holding the coordinator's restore lock, which
	// stages each member once, so no restore running owns another.
	if err := datadir.RemoveStaged(cfg.DataDir, func(p string) {
		a.log.Info("removed a data dir an interrupted restore staged", "member", name, "staged", p)
	}); err != nil {
		return "", err
	}
	out := cfg.DataDir + stagedSuffix + time.Now().UTC().Format("20060102T150405.000Z")
	if err := datadir.FromSnapshot(datadir.FromSnapshotOptions{
		Snapshot: snap, Name: cfg.Name, PeerURL: cfg.PeerURL,
		InitialCluster: req.InitialCluster, Token: cfg.InitialClusterToken, IDs: ids,
		Move: true, // our own temporary copy, removed below anyway
	}, out); err != nil {
		return "", err
	}
	if req.Version != "" {
		// Beside the staged dir; the commit moves it with the dir.
		if err := datadir.WriteRecord(out, req.Version, time.Now()); err != nil {
			_ = os.RemoveAll(out)
			return "", err
		}
	}
	a.log.Info("staged a restored data dir", "member", name, "staged", out)
	crashpoint.Hit(crashpoint.AgentStageStaged)
	return out, nil
}

// Applied reads the applied and committed index of stopped member name's
// data dir (datadir.Applied).
func (a *Agent) Applied(name string) (agentapi.AppliedIndex, error) {
	cfg, err := a.stoppedConfig(name, "reading its applied index")
	if err != nil {
		return agentapi.AppliedIndex{}, err
	}
	applied, committed, err := datadir.Applied(cfg.DataDir)
	if err != nil {
		return agentapi.AppliedIndex{}, badRequest{err}
	}
	return agentapi.AppliedIndex{Applied: applied, Committed: committed}, nil
}

// OpenDatabase opens stopped member name's database (member/snap/db) for
// a copy and returns it with its SHA-256 (hex) and size: the source of an
// upgrade by restore, which the coordinator stages every member from.
func (a *Agent) OpenDatabase(name string) (*os.File, string, int64, error) {
	cfg, err := a.stoppedConfig(name, "copying its database")
	if err != nil {
		return nil, "", 0, err
	}
	f, err := os.Open(filepath.Join(cfg.DataDir, "member", "snap", "db"))
	if err != nil {
		return nil, "", 0, badRequest{fmt.Errorf("database of %s: %w", name, err)}
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, "", 0, err
	}
	return f, hex.EncodeToString(h.Sum(nil)), n, nil
}

// stagedOf checks that staged is a data dir this agent staged for member
// name (DATADIR.restoring-STAMP), so a request cannot name another path.
func (a *Agent) stagedOf(name, staged string) (dataDir string, err error) {
	cfg, err := a.stoppedConfig(name, "committing or discarding a restored data dir")
	if err != nil {
		return "", err
	}
	dataDir = cfg.DataDir
	rest, ok := strings.CutPrefix(staged, dataDir+stagedSuffix)
	if !ok || rest == "" || strings.ContainsAny(rest, "/") {
		return "", badRequest{fmt.Errorf("%q is not a data dir staged for member %s", staged, name)}
	}
	if fi, err := os.Stat(staged); err != nil || !fi.IsDir() {
		return "", badRequest{fmt.Errorf("staged data dir %s of member %s: not there (%v)", staged, name, err)}
	}
	return dataDir, nil
}

// CommitDataDir moves member name's data dir aside (pre-restore) and puts
// the staged one in its place; it returns where the old one went.
func (a *Agent) CommitDataDir(name, staged string) (string, error) {
	dataDir, err := a.stagedOf(name, staged)
	if err != nil {
		return "", err
	}
	aside, err := datadir.MoveAside(dataDir, "pre-restore")
	if err != nil {
		return "", fmt.Errorf("move data dir of %s aside: %w (restored data waits in %s)", name, err, staged)
	}
	crashpoint.Hit(crashpoint.AgentCommitAside)
	// The version record a stage wrote goes with its dir (the old dir's
	// went aside with it), and first: a kill between the two renames then
	// leaves a record with no dir at the data dir's name, which the next
	// commit's MoveAside removes, not a record of the staged dir with no
	// dir, which no one would (RemoveStaged and leftovers list dirs).
	moved := true
	if err := os.Rename(datadir.RecordPath(staged), datadir.RecordPath(dataDir)); errors.Is(err, os.ErrNotExist) {
		moved = false // staged without a version
	} else if err != nil {
		return aside, fmt.Errorf("put the version record of the restored data dir of %s in place: %w (the data dir waits in %s)", name, err, staged)
	}
	crashpoint.Hit(crashpoint.AgentCommitRecord)
	if err := os.Rename(staged, dataDir); err != nil {
		if moved {
			_ = os.Rename(datadir.RecordPath(dataDir), datadir.RecordPath(staged))
		}
		return aside, fmt.Errorf("put restored data dir of %s in place: %w (it waits in %s)", name, err, staged)
	}
	// Durable before the coordinator records the commit: a power loss
	// must not put the old data dir back under a spec naming the new
	// timeline.
	if err := syncDir(filepath.Dir(dataDir)); err != nil {
		return aside, fmt.Errorf("put restored data dir of %s in place: %w", name, err)
	}
	crashpoint.Hit(crashpoint.AgentCommitDone)
	return aside, nil
}

// syncDir makes renames inside a directory durable (a variable so a test
// can see it called: the fsync itself is not observable).
var syncDir = atomicfile.SyncDir

// DiscardStaged removes a data dir this agent staged (never anything else).
func (a *Agent) DiscardStaged(name, staged string) error {
	if _, err := a.stagedOf(name, staged); err != nil {
		return err
	}
	if err := os.RemoveAll(staged); err != nil {
		return err
	}
	if err := os.Remove(datadir.RecordPath(staged)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
