package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/datadir"
)

// The data-dir endpoints act only on what belongs to the member: a commit
// or discard of a path the agent did not stage for it is refused, a
// snapshot whose sum does not match stages nothing, and a running member's
// data is not touched.
func TestDataDirEndpointsRefuse(t *testing.T) {
	root, _, srv := apiAgent(t)
	cfg := baseConfig()
	cfg.DataDir = filepath.Join(root, "steward", "members", cfg.Name, "data")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+cfg.Name, configJSON(t, cfg)); code != http.StatusOK {
		t.Fatalf("put member: %d %s", code, body)
	}
	victim := filepath.Join(root, "victim")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, staged string }{
		{"commit", victim},
		{"commit", cfg.DataDir + ".restoring-x/../../../victim"},
		{"discard", victim},
		{"discard", cfg.DataDir},
		{"discard", cfg.DataDir + ".restoring-"},
	} {
		code, body := call(t, srv, http.MethodPost, "/v1/members/"+cfg.Name+"/datadir/"+tt.path, `{"staged":"`+tt.staged+`"}`)
		if code != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s, want 400", tt.path, tt.staged, code, body)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a refused request removed or moved %s: %v", victim, err)
	}
	if _, err := os.Stat(cfg.DataDir); err != nil {
		t.Fatalf("a refused request moved the data dir: %v", err)
	}

	// A snapshot that does not match its sum stages nothing.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/v1/members/"+cfg.Name+"/datadir/stage", bytes.NewReader([]byte("not a database")))
	req.Header.Set("X-Steward-Stage", `{"initialCluster":"`+cfg.Name+`=`+cfg.PeerURL+`","sha256":"`+strings.Repeat("0", 64)+`"}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a snapshot with the wrong sum: %d, want 400", resp.StatusCode)
	}
	if m, _ := filepath.Glob(cfg.DataDir + ".restoring-*"); len(m) != 0 {
		t.Fatalf("staged anyway: %v", m)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "steward", "tmp-stage-*")); len(m) != 0 {
		t.Fatalf("left a temporary directory: %v", m)
	}
}

// The endpoints of an upgrade by restore across hosts: the agent reports
// the capability; a stopped member's database is served with its SHA-256;
// a running member's database, a member without one and a version record
// that is no etcd version are refused (400) and stage nothing.
func TestRebuildEndpoints(t *testing.T) {
	root, a, srv := apiAgent(t)
	if !slices.Contains(a.Info().Capabilities, agentapi.CapRebuildDataDirs) {
		t.Fatalf("the agent reports %v, not %s", a.Info().Capabilities, agentapi.CapRebuildDataDirs)
	}
	cfg := baseConfig()
	cfg.DataDir = filepath.Join(root, "steward", "members", cfg.Name, "data")
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+cfg.Name, configJSON(t, cfg)); code != http.StatusOK {
		t.Fatalf("put member: %d %s", code, body)
	}
	for _, p := range []string{"applied", "db"} {
		if code, body := call(t, srv, http.MethodGet, "/v1/members/"+cfg.Name+"/datadir/"+p, ""); code != http.StatusBadRequest || !strings.Contains(body, cfg.Name) {
			t.Errorf("%s of a member without a database: %d %s, want 400 naming it", p, code, body)
		}
	}
	db := filepath.Join(cfg.DataDir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	content := []byte("a stopped member's database")
	if err := os.WriteFile(db, content, 0o600); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/members/"+cfg.Name+"/datadir/db", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(content)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, content) || resp.Header.Get("X-Steward-SHA256") != hex.EncodeToString(sum[:]) {
		t.Fatalf("database: %d %q sha256 %q", resp.StatusCode, got, resp.Header.Get("X-Steward-SHA256"))
	}

	// A version record that is no etcd version stages nothing.
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/v1/members/"+cfg.Name+"/datadir/stage", bytes.NewReader(content))
	req.Header.Set("X-Steward-Stage", `{"initialCluster":"`+cfg.Name+`=`+cfg.PeerURL+`","version":"v3.6","sha256":"`+hex.EncodeToString(sum[:])+`"}`)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "v3.6") {
		t.Fatalf("a bad version record: %d %s, want 400 naming it", resp.StatusCode, body)
	}
	if m, _ := filepath.Glob(cfg.DataDir + ".restoring-*"); len(m) != 0 {
		t.Fatalf("staged anyway: %v", m)
	}

	// A member that is to run is not read.
	m, _ := a.member(cfg.Name)
	m.mu.Lock()
	m.desired = true
	m.mu.Unlock()
	for _, p := range []string{"applied", "db"} {
		if code, body := call(t, srv, http.MethodGet, "/v1/members/"+cfg.Name+"/datadir/"+p, ""); code != http.StatusBadRequest || !strings.Contains(body, "stop it") {
			t.Errorf("%s of a running member: %d %s, want 400", p, code, body)
		}
	}
}

// TestCommitDataDir: a commit moves the member's data dir aside
// (pre-restore), puts the staged one and its version record in place, and
// syncs the parent dir after the renames, so a power loss cannot undo a
// commit the coordinator then records. The fsync itself is not
// observable in a test: syncDir is swapped to see it called with the
// parent after the last rename; before the fix it was not. Not parallel:
// it swaps a package variable.
func TestCommitDataDir(t *testing.T) {
	root, a, srv := apiAgent(t)
	cfg := baseConfig()
	cfg.DataDir = filepath.Join(root, "steward", "members", cfg.Name, "data")
	staged := cfg.DataDir + ".restoring-20261127T100000.000Z"
	for _, d := range []string{filepath.Join(cfg.DataDir, "member", "old"), filepath.Join(staged, "member", "new")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(datadir.RecordPath(staged), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+cfg.Name, configJSON(t, cfg)); code != http.StatusOK {
		t.Fatalf("put member: %d %s", code, body)
	}
	var synced []string
	real := syncDir
	syncDir = func(d string) error {
		if _, err := os.Stat(datadir.RecordPath(cfg.DataDir)); err == nil {
			synced = append(synced, d) // after the last rename
		}
		return real(d)
	}
	t.Cleanup(func() { syncDir = real })
	aside, err := a.CommitDataDir(cfg.Name, staged)
	if err != nil || !strings.HasPrefix(aside, cfg.DataDir+".pre-restore-") {
		t.Fatalf("CommitDataDir = %q, %v", aside, err)
	}
	for _, p := range []string{filepath.Join(cfg.DataDir, "member", "new"), filepath.Join(aside, "member", "old"), datadir.RecordPath(cfg.DataDir)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after the commit: %v", err)
		}
	}
	if len(synced) != 1 || synced[0] != filepath.Dir(cfg.DataDir) {
		t.Fatalf("synced after the last rename: %q, want the parent %s once", synced, filepath.Dir(cfg.DataDir))
	}
}
