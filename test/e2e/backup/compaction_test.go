package backup_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestDeltaCompaction: with backup.compactAfter at 5 deltas, the backup
// leader folds the chain into a new full backup while a writer runs; a
// `steward backup compact` of that chain killed between storing its object
// and its manifest (crash point) leaves an object nobody lists, one killed
// after its manifest a listed backup that verifies, a store whose every
// backup verifies either way, and the same compaction then succeeds;
// restores from the chain, from the leader's compacted backup and from the
// command's give the same keyspace digest, with every acknowledged write.
func TestDeltaCompaction(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.CompactAfter = &spec.CompactAfter{Deltas: 5}
		// Every full backup kept: the test restores from the chain a
		// compaction folded.
		s.Backup.Retention = spec.Retention{KeepLast: 1000}
	})
	e.MustRun("up")
	cli := e.Client()

	// The backup leader compacts under writes.
	w := workload.Start(t, cli, workload.Options{Prefix: "compact", Timeout: time.Second, Interval: 5 * time.Millisecond})
	var folded backup.Manifest
	harness.Eventually(t, 90*time.Second, 250*time.Millisecond, "the backup leader to store a compacted full backup", func() error {
		for _, m := range harness.ListBackups(t, e) {
			if m.Kind == backup.KindFull && m.CompactedFrom != "" {
				folded = m
				return nil
			}
		}
		return fmt.Errorf("no full backup with compactedFrom yet")
	})
	res := w.Stop()
	if len(res.Acked) == 0 {
		t.Fatalf("no write acknowledged: %s", res)
	}
	e.MustRun("backup", "verify", folded.ID)

	// A compaction of the same chain killed before its manifest: its object
	// is stored, nothing new is listed, the store stays usable.
	store := e.Spec().BackupStoreDir(e.Dir)
	objectsBefore := orphanObjects(t, store)
	killedCompaction(t, e, backup.CrashCompactBeforeManifest, folded.CompactedFrom)
	orphans := orphanObjects(t, store)
	if len(orphans) != len(objectsBefore)+1 {
		t.Fatalf("after the crash: objects without a manifest %v (before: %v); want the killed compaction's", orphans, objectsBefore)
	}
	for _, m := range harness.ListBackups(t, e) {
		if strings.HasPrefix(orphans[len(orphans)-1], m.ID+".") {
			t.Fatalf("the killed compaction's object %s is listed as backup %s", orphans[len(orphans)-1], m.ID)
		}
	}
	e.MustRun("backup", "verify", "--all")

	// Killed after its manifest: a listed backup, checked before it was
	// stored, that verifies.
	before := harness.ListBackups(t, e)
	killedCompaction(t, e, backup.CrashCompactAfterManifest, folded.CompactedFrom)
	var stored []string
	for _, m := range harness.ListBackups(t, e) {
		if m.CompactedFrom == folded.CompactedFrom && !slices.ContainsFunc(before, func(b backup.Manifest) bool { return b.ID == m.ID }) {
			stored = append(stored, m.ID)
		}
	}
	if len(stored) != 1 {
		t.Fatalf("after a compaction killed past its manifest: new backups of the chain %v, want one", stored)
	}
	e.MustRun("backup", "verify", stored[0])
	if got := orphanObjects(t, store); len(got) != len(orphans) {
		t.Fatalf("objects without a manifest %v after the second crash, want %v", got, orphans)
	}

	// The same chain compacted again, to the end.
	var again backupd.CompactResult
	if err := json.Unmarshal([]byte(e.MustRun("backup", "compact", folded.CompactedFrom, "-o", "json")), &again); err != nil {
		t.Fatal(err)
	}
	if !again.Compacted || again.Backup == nil || again.Backup.CompactedFrom != folded.CompactedFrom || again.Backup.EndRevision < folded.EndRevision {
		t.Fatalf("compaction after the crash: %+v", again)
	}

	rev := putKeys(t, cli, "after/", 100)
	harness.WaitBackedUp(t, e, rev)
	want := workload.TakeDigest(t, cli, "", rev)

	// Restores from the chain and from the compacted full backup agree.
	cli.Close()
	e.MustRun("down")
	for _, id := range []string{folded.CompactedFrom, folded.ID, again.Backup.ID} {
		e.MustRun("restore", "--backup", id, "--to-revision", fmt.Sprint(want.Rev), "--force")
		e.MustRun("up")
		c := e.Client()
		workload.RequireEqual(t, "restored from "+id, workload.TakeDigest(t, c, "", 0), want)
		lost, err := workload.Missing(t.Context(), c, res)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost) > 0 {
			t.Fatalf("restored from %s: %d acknowledged writes missing, first %v", id, len(lost), lost[0].Keys)
		}
		c.Close()
		e.MustRun("down")
	}
}

// killedCompaction runs `steward backup compact id` with a crash point
// armed and requires it to die there.
func killedCompaction(t *testing.T, e *harness.Env, point, id string) {
	t.Helper()
	_, se, err := e.RunEnv([]string{crashpoint.EnvVar + "=" + point}, "backup", "compact", id)
	if err == nil || !strings.Contains(se, "crashpoint: "+point) {
		t.Fatalf("backup compact with %s armed: err %v, stderr %s", point, err, se)
	}
}

// orphanObjects lists the full backup objects in a local store that have
// no manifest, sorted.
func orphanObjects(t *testing.T, store string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(store, backup.KindFull))
	if err != nil {
		t.Fatal(err)
	}
	manifests := map[string]bool{}
	for _, d := range ents {
		if id, ok := strings.CutSuffix(d.Name(), ".json"); ok {
			manifests[id] = true
		}
	}
	var out []string
	for _, d := range ents {
		id, _, ok := strings.Cut(d.Name(), ".db.zst")
		if ok && !manifests[id] && !strings.HasPrefix(d.Name(), ".") {
			out = append(out, d.Name())
		}
	}
	sort.Strings(out)
	return out
}
