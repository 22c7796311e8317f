package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// TestProbesWithoutRunningMembers: /livez answers while the agent runs;
// /readyz is 503 without members, and names why for a member the agent
// does not run, one configured and stopped, and one wanted running that is
// not Running yet; the lease's health says the same.
func TestProbesWithoutRunningMembers(t *testing.T) {
	dir := t.TempDir()
	a := New(Options{Dir: dir, Log: slog.New(slog.DiscardHandler)})
	h := a.ProbeHandler()
	get := func(path string) (int, Readiness) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var rd Readiness
		if rec.Code != http.StatusOK || path != "/livez" {
			if err := json.Unmarshal(rec.Body.Bytes(), &rd); err != nil {
				t.Fatalf("%s: %v: %s", path, err, rec.Body)
			}
		}
		return rec.Code, rd
	}
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d", code)
	}
	if code, rd := get("/readyz"); code != http.StatusServiceUnavailable || rd.Ready || len(rd.Members) != 0 {
		t.Errorf("/readyz without members = %d %+v", code, rd)
	}
	if code, rd := get("/readyz?member=etcd-9"); code != http.StatusServiceUnavailable || len(rd.Members) != 1 || rd.Members[0].Reason != ReasonNoMember {
		t.Errorf("/readyz of a member not run = %d %+v", code, rd)
	}

	cfg := agentapi.MemberConfig{Name: "etcd-1", DataDir: filepath.Join(dir, "members", "etcd-1", "data"), Version: "3.6.16",
		ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2", InitialCluster: "etcd-1=http://127.0.0.1:2",
		InitialClusterState: "new", InitialClusterToken: "t"}
	a.mu.Lock()
	a.members["etcd-1"] = newMember(a, cfg)
	a.mu.Unlock()
	if code, rd := get("/readyz"); code != http.StatusServiceUnavailable || len(rd.Members) != 1 || rd.Members[0].Reason != ReasonStopped {
		t.Errorf("/readyz of a stopped member = %d %+v", code, rd)
	}
	m, _ := a.member("etcd-1")
	m.mu.Lock()
	m.desired, m.state = true, agentapi.StateStarting
	m.mu.Unlock()
	if code, rd := get("/readyz"); code != http.StatusServiceUnavailable || rd.Members[0].Reason != ReasonNotStarted {
		t.Errorf("/readyz of a member starting = %d %+v", code, rd)
	}
	if st := a.LeaseHealth("etcd-1")(context.Background()); st.Healthy || st.Why == "" {
		t.Errorf("lease health of a member starting: %+v", st)
	}
	// The only member stands for a lease named otherwise; none or two do not.
	if st := a.LeaseHealth("pod-0")(context.Background()); st.Healthy || st.Why != ReasonNotStarted+": member etcd-1 is Starting" {
		t.Errorf("lease health of the only member: %+v", st)
	}
	a.mu.Lock()
	a.members["etcd-2"] = newMember(a, agentapi.MemberConfig{Name: "etcd-2"})
	a.mu.Unlock()
	if st := a.LeaseHealth("pod-0")(context.Background()); st.Healthy || st.Why != "the agent runs no member pod-0 and not exactly one member" {
		t.Errorf("lease health with two members, neither named: %+v", st)
	}
}
