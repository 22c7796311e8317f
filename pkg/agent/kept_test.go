package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// TestKeptEndpoints: GET /v1/kept lists the kept copies beside the
// members' data dirs and of a removed member under DIR/members; POST
// /v1/kept/remove removes one and refuses (400, nothing removed) a data
// dir or a path that is not a kept copy beside one. A stage removes what
// an interrupted restore staged for the member, and keeps the IDs it is
// sent.
func TestKeptEndpoints(t *testing.T) {
	root, _, srv := apiAgent(t)
	cfg := baseConfig()
	cfg.PeerURL = "http://127.0.0.1:2380"
	cfg.InitialCluster = "etcd-1=" + cfg.PeerURL
	cfg.DataDir = filepath.Join(root, "steward", "members", cfg.Name, "data")
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+cfg.Name, configJSON(t, cfg)); code != http.StatusOK {
		t.Fatalf("put member: %d %s", code, body)
	}
	mk := func(p string) string {
		if err := os.MkdirAll(filepath.Join(p, "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk(cfg.DataDir)
	pre := mk(cfg.DataDir + ".pre-restore-20261127T100000.000Z")
	stale := mk(cfg.DataDir + ".restoring-20261127T110000.000Z")
	removed := mk(filepath.Join(root, "steward", "members", "etcd-9", "data.removed-20261127T090000.000Z"))

	code, body := call(t, srv, http.MethodGet, "/v1/kept", "")
	var ks []datadir.Kept
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ks) != nil {
		t.Fatalf("GET /v1/kept: %d %s", code, body)
	}
	got := map[string]string{}
	for _, k := range ks {
		got[k.Path] = k.Member + " " + k.Kind
	}
	if len(ks) != 3 || got[pre] != "etcd-1 pre-restore" || got[stale] != "etcd-1 restoring" || got[removed] != "etcd-9 removed" {
		t.Fatalf("GET /v1/kept: %v", got)
	}

	// Another cluster's copy beside a member's data dir in a shared parent
	// dir (/srv/etcd/a-1 and /srv/etcd/b-1): listed with no member, and
	// never removed.
	cfg2 := cfg
	cfg2.Name = "a-1"
	cfg2.DataDir = filepath.Join(root, "shared", "a-1")
	if code, body := call(t, srv, http.MethodPut, "/v1/members/"+cfg2.Name, configJSON(t, cfg2)); code != http.StatusOK {
		t.Fatalf("put member: %d %s", code, body)
	}
	foreign := mk(filepath.Join(root, "shared", "b-1.pre-restore-20261127T080000.000Z"))
	code, body = call(t, srv, http.MethodGet, "/v1/kept", "")
	ks = nil
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ks) != nil || len(ks) != 4 {
		t.Fatalf("GET /v1/kept with another cluster's copy: %d %s", code, body)
	}
	for _, k := range ks {
		if k.Path == foreign && k.Member != "" {
			t.Errorf("another cluster's copy listed as member %q's", k.Member)
		}
	}

	for _, bad := range []string{cfg.DataDir, filepath.Join(root, "elsewhere.pre-restore-20261127T100000.000Z"), pre + "/member", foreign} {
		if code, body := call(t, srv, http.MethodPost, "/v1/kept/remove", `{"path":"`+bad+`"}`); code != http.StatusBadRequest {
			t.Errorf("remove %s: %d %s, want 400", bad, code, body)
		}
	}
	for _, p := range []string{filepath.Join(pre, "member"), filepath.Join(foreign, "member")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a refused removal removed something: %v", err)
		}
	}
	if code, body := call(t, srv, http.MethodPost, "/v1/kept/remove", `{"path":"`+removed+`"}`); code != http.StatusOK {
		t.Fatalf("remove %s: %d %s", removed, code, body)
	}
	if _, err := os.Stat(removed); err == nil {
		t.Fatal("kept copy not removed")
	}

	// A stage removes the stale staged dir and keeps the IDs sent.
	snap := filepath.Join(root, "snapshot.db")
	db, err := bolt.Open(snap, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("key")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	b, _ := os.ReadFile(snap)
	sum := sha256.Sum256(b)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/v1/members/"+cfg.Name+"/datadir/stage", bytes.NewReader(b))
	req.Header.Set("X-Steward-Stage", `{"initialCluster":"`+cfg.InitialCluster+`","memberIDs":{"etcd-1":"1111"},"clusterID":"c1","sha256":"`+hex.EncodeToString(sum[:])+`"}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var staged struct{ Staged string }
	_ = json.NewDecoder(resp.Body).Decode(&staged)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || staged.Staged == "" {
		t.Fatalf("stage: %d %+v", resp.StatusCode, staged)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("the stale staged dir is still there after a stage")
	}
	if mid, cid, err := datadir.MemberID(datadir.WALDir(staged.Staged)); err != nil || mid != 0x1111 || cid != 0xc1 {
		t.Errorf("staged WAL: member %x cluster %x (%v), want 1111 and c1", mid, cid, err)
	}
	if _, err := os.Stat(pre); err != nil {
		t.Errorf("a stage removed a kept copy: %v", err)
	}
}
