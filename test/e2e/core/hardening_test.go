package core_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// TestHardening (issue 13): inputs an attacker or a careless user gives,
// on one one-member cluster: each is refused with one clear error, or
// handled, and nothing leaks or is left behind.
func TestHardening(t *testing.T) {
	t.Parallel()
	v := binaries.EmbeddedVersion()

	t.Run("up --members 0 is refused", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		out := e.MustFail("up", "--members", "0", "--binary-store", e.Store)
		if !strings.Contains(out, "--members: a cluster needs at least one member, got 0") {
			t.Errorf("up --members 0: %s", out)
		}
		if exists(filepath.Join(e.Dir, spec.FileName)) {
			t.Error("up --members 0 wrote a spec")
		}
	})

	t.Run("a Steward directory in a parent every user may write is refused", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		parent := filepath.Join(e.Dir, "open")
		if err := os.Mkdir(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, 0o777); err != nil {
			t.Fatal(err)
		}
		_, se, err := e.RunDir(filepath.Join(parent, "d"), "up", "--members", "1", "--binary-store", e.Store)
		if err == nil || !strings.Contains(se, "its parent "+parent+" is writable by every user") {
			t.Fatalf("up in a world-writable parent: %v: %s", err, se)
		}
		if exists(filepath.Join(parent, "d")) {
			t.Error("a refused directory was created")
		}
	})

	t.Run("a stored version without a manifest is not run", func(t *testing.T) {
		t.Parallel()
		e := harness.New(t)
		// A store laid out by hand: the real etcd, but no manifest.json
		// recording its SHA-256.
		store := filepath.Join(t.TempDir(), "store")
		vdir := filepath.Join(store, binaries.DirPrefix+v)
		if err := os.MkdirAll(vdir, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(e.Store, binaries.DirPrefix+v, "etcd"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, "etcd"), b, 0o700); err != nil {
			t.Fatal(err)
		}
		out := e.MustFail("up", "--members", "1", "--version", v, "--binary-store", store)
		if !strings.Contains(out, "refusing to start etcd "+v) || !strings.Contains(out, vdir+" has no manifest.json") ||
			!strings.Contains(out, "steward binaries import --force --store "+store+" --version "+v) {
			t.Errorf("up with a version without a manifest: %s", out)
		}
		if exists(filepath.Join(vdir, binaries.ManifestName)) {
			t.Error("a manifest was written for a binary nobody checked")
		}
	})

	e := harness.New(t)
	// A Steward directory made 0777 beforehand, and a caller whose
	// environment holds a secret and an ETCD_* variable etcd would read
	// as a flag.
	if err := os.Chmod(e.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-hardening"
	_, se, err := e.RunEnv([]string{"AWS_SECRET_ACCESS_KEY=" + secret, "ETCD_QUOTA_BACKEND_BYTES=1"},
		"up", "--members", "1", "--version", v, "--binary-store", e.Store)
	if err != nil {
		t.Fatalf("up: %v\n%s", err, se)
	}
	name := e.Spec().Members[0].Name

	t.Run("the Steward directory is made private", func(t *testing.T) {
		fi, err := os.Stat(e.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o700 {
			t.Errorf("Steward directory is %04o after up; want 0700", m)
		}
		if !strings.Contains(se, "made "+e.Dir+" (was 0777) private") {
			t.Errorf("up did not say it tightened the directory:\n%s", se)
		}
	})

	t.Run("children do not inherit secrets or ETCD_* variables", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(e.Dir, "run", "agent.pid"))
		if err != nil {
			t.Fatal(err)
		}
		agentPID, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		for who, pid := range map[string]int{"agent": agentPID, "member " + name: e.MemberPID(name)} {
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if bytes.HasPrefix(kv, []byte("ETCD_")) || bytes.Contains(kv, []byte(secret)) {
					t.Errorf("%s (pid %d) inherited %s", who, pid, kv)
				}
			}
		}
	})

	t.Run("restore --to-revision -5 is refused", func(t *testing.T) {
		out := e.MustFail("restore", "--to-revision", "-5")
		if !strings.Contains(out, "--to-revision: target revision -5: not a revision") {
			t.Errorf("restore --to-revision -5: %s", out)
		}
	})

	t.Run("a key file others may read is refused; keygen writes 0600 and never overwrites", func(t *testing.T) {
		key := filepath.Join(e.Dir, "backup.key")
		e.MustRun("backup", "keygen", "--out", key)
		if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("keygen: %v, %v; want a 0600 file", fi, err)
		}
		orig, _ := os.ReadFile(key)
		if out := e.MustFail("backup", "keygen", "--out", key); !strings.Contains(out, "already exists") {
			t.Errorf("keygen over an existing key: %s", out)
		}
		if now, _ := os.ReadFile(key); !bytes.Equal(orig, now) {
			t.Error("keygen changed an existing key")
		}
		if err := os.Chmod(key, 0o644); err != nil {
			t.Fatal(err)
		}
		// (The agent's continuous loop stores full backups of its own.)
		before, _ := filepath.Glob(filepath.Join(e.Dir, "backups", "full", "*.json"))
		out := e.MustFail("backup", "now", "--key-file", key)
		if !strings.Contains(out, "has mode 0644") || !strings.Contains(out, "chmod 600 "+key) {
			t.Errorf("backup now with a 0644 key: %s", out)
		}
		after, _ := filepath.Glob(filepath.Join(e.Dir, "backups", "full", "*.json"))
		for _, m := range after {
			if !slices.Contains(before, m) {
				if b, _ := os.ReadFile(m); bytes.Contains(b, []byte(`"encryption"`)) {
					t.Errorf("an encrypted backup was stored with a refused key: %s", m)
				}
			}
		}
	})

	t.Run("a snapshot that panics bbolt fails verify cleanly", func(t *testing.T) {
		m := harness.BackupNow(t, e)
		// Replace the stored snapshot with one whose page header makes
		// bbolt panic, re-hashed (etcd's appended SHA-256) and with the
		// manifest's size and SHA-256 updated: only the database is bad.
		raw, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "pkg", "backup", "testdata", "malformed", "p2-o8-vff.db"))
		if err != nil {
			t.Fatal(err)
		}
		body := raw[:len(raw)-sha256.Size]
		sum := sha256.Sum256(body)
		raw = append(append([]byte(nil), body...), sum[:]...)
		zw, _ := zstd.NewWriter(nil)
		obj := zw.EncodeAll(raw, nil)
		store := filepath.Join(e.Dir, "backups")
		if err := os.WriteFile(filepath.Join(store, m.Object), obj, 0o600); err != nil {
			t.Fatal(err)
		}
		// The manifest is re-sealed with the cluster's backup key, as one
		// who holds it could: only the database is bad.
		mp := filepath.Join(store, "full", m.ID+".json")
		mb, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		var doc backup.Manifest
		if err := json.Unmarshal(mb, &doc); err != nil {
			t.Fatal(err)
		}
		osum := sha256.Sum256(obj)
		doc.SHA256, doc.Size, doc.RawSize, doc.SnapshotHash = hex.EncodeToString(osum[:]), int64(len(obj)), int64(len(raw)), 0
		ak, err := backup.LoadAuthKey(filepath.Join(e.Dir, "pki", pki.BackupAuthKey))
		if err != nil {
			t.Fatal(err)
		}
		ak.Seal(&doc)
		mb, _ = json.MarshalIndent(doc, "", "  ")
		if err := os.WriteFile(mp, mb, 0o600); err != nil {
			t.Fatal(err)
		}

		so, se, err := e.Run("backup", "verify", m.ID)
		if err == nil {
			t.Fatalf("verify of a malformed snapshot succeeded:\n%s%s", so, se)
		}
		all := so + se
		if !strings.Contains(all, backup.ErrMalformedSnapshot.Error()) || strings.Contains(all, "goroutine ") {
			t.Errorf("verify: want a clear error without a Go trace:\n%s", all)
		}
		if left, _ := filepath.Glob(filepath.Join(e.Dir, "tmp-*")); len(left) != 0 {
			t.Errorf("verify left %v behind", left)
		}
		if !harness.Healthy(e.Status()) {
			t.Error("cluster unhealthy after the verify")
		}
	})
}
