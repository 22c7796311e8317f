package e2e

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestAdopt: a three-member etcd 3.5 cluster the test started itself
// (plain flags, its own CA), attached with --continuous, then member
// infra1 adopted by --pid under a writer: the adopt plan is done, the old
// process is gone, the member runs under the local agent with the same
// member ID and cluster ID, the spec records it adopted while the other
// two stay external, the agent restarts it after kill -9, and no
// acknowledged write is lost.
func TestAdopt(t *testing.T) {
	f := harness.StartForeignCluster(t, adoptVersion, 3)
	fcli := f.MustClient()
	e := harness.New(t)
	e.MustRun(append(attachArgs(f), "--continuous")...)
	// The agent runs an adopted member's version from the binary store.
	s := e.Spec()
	s.BinaryStore = e.Store
	if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	old := f.Members[0]
	before, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, m := range before.Members {
		if m.Name == old.Name {
			id = m.ID
		}
	}
	w := workload.Start(t, fcli, workload.Options{Prefix: "/adopt", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second})
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write", w.AckedAbove(100))

	oldPID := old.PID()
	out := e.MustRun("adopt", "--pid", strconv.Itoa(oldPID), "-o", "json")
	var p plan.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("adopt -o json: %v\n%s", err, out)
	}
	if p.Kind != plan.KindAdopt || p.State != plan.Done {
		t.Fatalf("adopt plan %s is %s %s, want adopt done:\n%s", p.ID, p.Kind, p.State, out)
	}
	if old.Running() {
		t.Errorf("the old process %d of %s still runs after the adoption", oldPID, old.Name)
	}
	after, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId || len(after.Members) != 3 {
		t.Errorf("after the adoption: cluster %x with %d members, want %x with 3", after.Header.ClusterId, len(after.Members), before.Header.ClusterId)
	}
	found := false
	for _, m := range after.Members {
		found = found || m.Name == old.Name && m.ID == id
	}
	if !found {
		t.Errorf("member %s no longer has ID %x: %v", old.Name, id, after.Members)
	}
	sp := e.Spec()
	for _, m := range sp.Members {
		if adopted := m.Name == old.Name; m.IsAdopted() != adopted || adopted && m.DataDir != old.DataDir {
			t.Errorf("spec member %s: agent %q, data dir %q, adopted %v; want adopted only %s with data dir %s", m.Name, m.Agent, m.DataDir, m.IsAdopted(), old.Name, old.DataDir)
		}
	}
	if sp.External == nil {
		t.Errorf("the spec lost its external block with two members still external")
	}
	st := e.WaitStatus(30*time.Second, old.Name+" running under the agent", func(st *cluster.Status) bool {
		ms, _ := st.Member(old.Name)
		return harness.Healthy(st) && ms.PID != 0
	})
	ms, _ := st.Member(old.Name)
	if ms.PID == oldPID {
		t.Fatalf("%s runs as the old pid %d", old.Name, oldPID)
	}
	if err := syscall.Kill(ms.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.WaitStatus(60*time.Second, "the agent to restart "+old.Name+" after kill -9", func(st *cluster.Status) bool {
		n, _ := st.Member(old.Name)
		return harness.Healthy(st) && n.PID != 0 && n.PID != ms.PID
	})
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the restart", w.AckedAbove(w.Acked()+100))
	res := w.Stop()
	workload.RequireKeys(t, fcli, res)
	t.Logf("adopted %s (member %x) under %d acknowledged writes", old.Name, id, len(res.Acked))
}
