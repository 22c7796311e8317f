package backup_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// editManifest reads a stored manifest as a JSON object, lets edit change
// it, and writes it to the manifest name of its (maybe new) id. It returns
// that name.
func editManifest(t *testing.T, storeDir string, m backup.Manifest, edit func(map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(storeDir, m.Kind, m.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	edit(f)
	out, _ := json.MarshalIndent(f, "", "  ")
	name := filepath.Join(m.Kind, f["id"].(string)+".json")
	if err := os.WriteFile(filepath.Join(storeDir, name), out, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestBackupForgedAndCorruptManifests (issue 13, findings 1 and 7): a full
// manifest copied into the store with endRevision 999999999999 and a
// createdAt in 2030 (no key needed), and a manifest that is not JSON. After
// the agent restarts, new writes are still backed up, BackupReady is True
// only because they are and names the ignored manifests, and backup list,
// gc and verify --all skip them and say so.
func TestBackupForgedAndCorruptManifests(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	harness.WaitBackedUp(t, e, putKeys(t, cli, "before/", 10))
	var full backup.Manifest
	for _, m := range harness.ListBackups(t, e) {
		if m.Kind == backup.KindFull {
			full = m
		}
	}
	if full.ID == "" {
		t.Fatal("no full backup")
	}
	store := filepath.Join(e.Dir, "backups")
	forged := editManifest(t, store, full, func(f map[string]any) {
		f["id"] = "20300101T000000.000Z-full-r999999999999"
		f["endRevision"] = 999999999999
		f["createdAt"] = "2030-01-01T00:00:00Z"
		f["object"] = full.Object // the real object
	})
	corrupt := "full/20300102T000000.000Z-full-r5.json"
	if err := os.WriteFile(filepath.Join(store, corrupt), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	e.MustRun("down")
	e.MustRun("up")
	cli = e.Client()
	rev := putKeys(t, cli, "after/", 10)
	harness.WaitBackedUp(t, e, rev) // a delta holds the new writes
	st := e.WaitStatus(30*time.Second, "BackupReady True past the new writes", func(st *status.Status) bool {
		c := harness.Cond(st, status.CondBackupReady)
		return c.Status == "True" && !strings.Contains(c.Message, "999999999999 stored")
	})
	msg := harness.Cond(st, status.CondBackupReady).Message
	for _, want := range []string{"ignored 2 untrusted manifests", forged, corrupt} {
		if !strings.Contains(msg, want) {
			t.Errorf("BackupReady message %q does not name %q", msg, want)
		}
	}
	so, se, err := e.Run("backup", "list", "-o", "json")
	if err != nil {
		t.Fatalf("backup list failed on one bad manifest: %v %s", err, se)
	}
	if strings.Contains(so, "999999999999") || !strings.Contains(se, forged) || !strings.Contains(se, corrupt) {
		t.Errorf("backup list: stdout %s\nstderr %s", so, se)
	}
	var gc restore.GCResult
	if err := json.Unmarshal([]byte(e.MustRun("backup", "gc", "--dry-run", "-o", "json")), &gc); err != nil {
		t.Fatal(err)
	}
	if len(gc.Ignored) != 2 || len(gc.Kept) == 0 {
		t.Errorf("gc: %+v", gc)
	}
	so, se, err = e.Run("backup", "verify", "--all", "-o", "json")
	var res []restore.VerifyResult
	if jerr := json.Unmarshal([]byte(so), &res); err == nil || jerr != nil {
		t.Fatalf("verify --all with bad manifests: %v %v\n%s\n%s", err, jerr, so, se)
	}
	okCount, failed := 0, map[string]bool{}
	for _, r := range res {
		if r.OK {
			okCount++
		} else {
			failed[r.ID] = true
		}
	}
	if okCount < 2 || !failed["manifest:"+forged] || !failed["manifest:"+corrupt] || len(failed) != 2 {
		t.Errorf("verify --all: %+v", res)
	}
}

// TestRestoreRefusesFalseDeltaRange (issue 13, finding 2): the newest
// delta's manifest is replaced by one claiming fewer revisions than its
// object holds. Unauthenticated, it is not trusted and restore refuses to
// leave out what it describes; trusted deliberately (MAC stripped,
// --allow-unauthenticated), restore checks the segment's first and last
// event against it and refuses. Nothing is moved aside.
func TestRestoreRefusesFalseDeltaRange(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	rev := putKeys(t, cli, "a/", 10)
	harness.WaitBackedUp(t, e, rev)
	// Single puts at once, until the newest delta holds several revisions
	// (a segment closes 250 ms after its first event: on a loaded machine
	// serial puts can be slower than that and get one segment each).
	var last backup.Manifest
	for attempt := 0; attempt < 5 && last.EndRevision <= last.StartRevision; attempt++ {
		revs := make([]int64, 20)
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range revs {
			wg.Go(func() {
				resp, err := cli.Put(t.Context(), fmt.Sprintf("b/%d/%02d", attempt, i), "v")
				if err != nil {
					errs[i] = err
					return
				}
				revs[i] = resp.Header.Revision
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		harness.WaitBackedUp(t, e, slices.Max(revs))
		last = backup.Manifest{}
		for _, m := range harness.ListBackups(t, e) {
			if m.Kind == backup.KindDelta && m.EndRevision > last.EndRevision {
				last = m
			}
		}
	}
	cli.Close()
	e.MustRun("down")
	if last.EndRevision == 0 || last.EndRevision <= last.StartRevision {
		t.Fatalf("want a delta of several revisions, have %+v", last)
	}
	store := filepath.Join(e.Dir, "backups")
	falseEnd := last.EndRevision - 1
	falseID := strings.TrimSuffix(last.ID, fmt.Sprintf("-%d", last.EndRevision)) + fmt.Sprintf("-%d", falseEnd)
	falseObj := backup.ObjectName(backup.KindDelta, falseID, last.Encryption != "")
	// With its MAC (now wrong): forged. The real manifest goes, the object
	// takes the forged ID's name.
	editManifest(t, store, last, func(f map[string]any) {
		f["id"], f["endRevision"], f["object"] = falseID, falseEnd, falseObj
	})
	if err := os.Remove(filepath.Join(store, backup.KindDelta, last.ID+".json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(store, last.Object), filepath.Join(store, falseObj)); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	out := e.MustFail("restore", "--force")
	if !strings.Contains(out, "not trusted") || !strings.Contains(out, falseID) || !strings.Contains(out, "--skip-untrusted") {
		t.Errorf("restore with a forged delta manifest: %s", out)
	}
	// Without a MAC, trusted on purpose: the segment itself contradicts it.
	editManifest(t, store, backup.Manifest{Kind: backup.KindDelta, ID: falseID}, func(f map[string]any) {
		delete(f, "mac")
		delete(f, "macKeyID")
		delete(f, "format")
	})
	out = e.MustFail("restore", "--force", "--allow-unauthenticated")
	if want := fmt.Sprintf("holds revisions %d to %d, but its manifest says %d to %d", last.StartRevision, last.EndRevision, last.StartRevision, falseEnd); !strings.Contains(out, want) {
		t.Errorf("restore trusting a false range: %s\nwant %q", out, want)
	}
	if aside, _ := filepath.Glob(dataDir + ".pre-restore-*"); len(aside) > 0 {
		t.Errorf("refused restores moved data aside: %v", aside)
	}
}

// TestBackupVerifyRefusesBomb (issue 13, finding 3): a full backup's object
// replaced by a small zstd stream that expands to 300 MB of zeros, the
// manifest unchanged. verify refuses on the object's SHA-256 without
// decompressing it, and leaves no temporary file.
func TestBackupVerifyRefusesBomb(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	putKeys(t, cli, "k/", 5)
	cli.Close()
	full := harness.BackupNow(t, e)
	obj := filepath.Join(e.Dir, "backups", full.Object)
	f, err := os.OpenFile(obj, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(zw, zeros{}, 300<<20); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, _ := os.Stat(obj)
	t.Logf("bomb: %d bytes stored", fi.Size())
	out := e.MustFail("backup", "verify", full.ID)
	if !strings.Contains(out, "not decompressed") {
		t.Errorf("verify of a bomb: %s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(e.Dir, "tmp-verify-*")); len(left) > 0 {
		t.Errorf("verify left %v", left)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
