package agent

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
