package core_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestStatusQuorumLost: with two of three members stopped, status reports
// what it always did: Ready False/QuorumLost naming every member, the
// member left up as answering but unhealthy (no linearizable read within
// the probe timeout) with its ID, version and revision, the stopped ones
// with the IDs etcd's member list gives them (the serializable list of the
// member left: the linearizable one needs quorum), the cluster's ID,
// version and three voting members, and the same conditions as when it
// was healthy. Status asks the requests that need quorum at the same time
// instead of one after the other (docs/benchmarks.md, quorum loss): this
// test holds what it reports, not how long it takes.
func TestStatusQuorumLost(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, binaries.EmbeddedVersion())
	names := e.Spec().MemberNames()
	healthy := e.WaitStatus(time.Minute, "healthy", harness.Healthy)
	e.MustRun("member", "stop", names[0])
	e.MustRun("member", "stop", names[1], "--force")
	st := e.WaitStatus(30*time.Second, "majority down", func(st *status.Status) bool {
		return harness.Cond(st, status.CondReady).Status == "False"
	})
	b, _ := json.MarshalIndent(st, "", "  ")
	t.Logf("status with quorum lost:\n%s", b)

	c := st.Cluster
	if c.Quorate || c.Leader != "" || c.HealthyMembers != 0 || c.VotingMembers != 3 || c.Learners != 0 {
		t.Errorf("cluster with quorum lost: %+v, want not quorate, no leader, 0 healthy, 3 voting members, no learner", c)
	}
	if c.ID != healthy.Cluster.ID || c.Version != healthy.Cluster.Version || c.StorageVersion != healthy.Cluster.StorageVersion {
		t.Errorf("cluster ID, version and storage version with quorum lost: %q %q %q, want those of the healthy cluster %q %q %q",
			c.ID, c.Version, c.StorageVersion, healthy.Cluster.ID, healthy.Cluster.Version, healthy.Cluster.StorageVersion)
	}
	for i, name := range names {
		m, ok := st.Member(name)
		h, _ := healthy.Member(name)
		if !ok || m.Healthy || m.ID == "" || m.ID != h.ID {
			t.Errorf("member %s with quorum lost: %+v, want unhealthy with its ID %s (from etcd's member list)", name, m, h.ID)
			continue
		}
		if i < 2 {
			if m.Process != "Stopped" || m.LastError != "stopped by the operator" || m.Role != "unknown" {
				t.Errorf("stopped member %s: process %q, role %q, last error %q; want Stopped, unknown, stopped by the operator", name, m.Process, m.Role, m.LastError)
			}
			continue
		}
		if m.Process != "Running" || (m.Role != "follower" && m.Role != "leader") || m.Version == "" || m.Revision < h.Revision || m.DBSize == 0 ||
			m.LastError != "no answer within 2s" || len(m.Alarms) != 0 {
			t.Errorf("member left up %s: %+v; want Running, follower or leader (not stepped down yet), its version, revision, DB size, no alarm, last error \"no answer within 2s\"", name, m)
		}
	}
	ready := harness.Cond(st, status.CondReady)
	if ready.Status != "False" || ready.Reason != "QuorumLost" ||
		!strings.HasPrefix(ready.Message, "no linearizable read succeeded: 2 of 3 voting members needed; not ready: ") {
		t.Errorf("Ready with quorum lost: %+v", ready)
	}
	for _, name := range names {
		if !strings.Contains(ready.Message, name+": ") {
			t.Errorf("Ready's message does not name %s: %q", name, ready.Message)
		}
	}
	if all := harness.Cond(st, status.CondAllMembersReady); all.Status != "False" || all.Reason != "NotAllMembersReady" || all.Message != strings.TrimPrefix(ready.Message, "no linearizable read succeeded: 2 of 3 voting members needed; ") {
		t.Errorf("AllMembersReady with quorum lost: %+v", all)
	}
	var types, healthyTypes []string
	for _, cond := range st.Conditions {
		types = append(types, cond.Type)
	}
	for _, cond := range healthy.Conditions {
		healthyTypes = append(healthyTypes, cond.Type)
	}
	if !slices.Equal(types, healthyTypes) {
		t.Errorf("conditions with quorum lost %v, want those of the healthy cluster %v", types, healthyTypes)
	}
}
