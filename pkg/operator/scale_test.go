package operator

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

func TestDecideScale(t *testing.T) {
	for _, tc := range []struct {
		name                string
		want, members       int
		hibernated, quorate bool
		act                 ScaleAction
		ordinal             int
	}{
		{"as asked", 3, 3, false, true, ScaleNone, 0},
		{"as asked without quorum", 3, 3, false, false, ScaleNone, 0},
		{"up: the next ordinal", 5, 3, false, true, ScaleUp, 3},
		{"1 -> 3", 3, 1, false, true, ScaleUp, 1},
		{"down: the highest ordinal", 3, 5, false, true, ScaleDown, 4},
		{"3 -> 1", 1, 3, false, true, ScaleDown, 2},
		{"up without quorum", 5, 3, false, false, ScaleBlocked, 0},
		{"down without quorum", 1, 3, false, false, ScaleBlocked, 0},
		{"hibernate", 0, 3, false, true, ScaleHibernate, 0},
		{"hibernate without quorum", 0, 3, false, false, ScaleBlocked, 0},
		{"stays hibernated", 0, 3, true, false, ScaleNone, 0},
		{"wake", 3, 3, true, false, ScaleWake, 0},
		{"wake to another size: the old one first", 5, 3, true, false, ScaleWake, 0},
	} {
		act, i := DecideScale(tc.want, tc.members, tc.hibernated, tc.quorate)
		if act != tc.act || i != tc.ordinal {
			t.Errorf("%s: %q %d, want %q %d", tc.name, act, i, tc.act, tc.ordinal)
		}
	}
}

func TestStatefulSetReplicas(t *testing.T) {
	ec := testCluster()
	ec.Spec.Replicas = 5
	if got := StatefulSetReplicas(ec, nil); got != 5 {
		t.Errorf("no cluster yet: %d, want spec.replicas", got)
	}
	dir := t.TempDir()
	c := &cluster.Cluster{Dir: dir, Spec: &spec.Cluster{Agents: []spec.Agent{{Name: "db-0"}, {Name: "db-1"}, {Name: "db-2"}}}}
	if got := StatefulSetReplicas(ec, c); got != 3 {
		t.Errorf("%d, want the spec's 3 hosts", got)
	}
	c.Spec.Name = "db"
	if err := os.WriteFile(filepath.Join(dir, growingFile), []byte("db-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := StatefulSetReplicas(ec, c); got != 4 {
		t.Errorf("growing: %d, want the 3 hosts and the pod being added", got)
	}
	if err := os.WriteFile(filepath.Join(dir, growingFile), []byte("db-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := StatefulSetReplicas(ec, c); got != 3 {
		t.Errorf("a stale growing mark: %d, want 3", got)
	}
	if err := os.WriteFile(filepath.Join(dir, hibernatedFile), []byte("3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := StatefulSetReplicas(ec, c); got != 0 {
		t.Errorf("hibernated: %d, want 0", got)
	}
	n := int32(2)
	if s := StatefulSet(ec, PodOptions{Replicas: &n}); *s.Spec.Replicas != 2 {
		t.Errorf("StatefulSet replicas %d, want the given 2", *s.Spec.Replicas)
	}
}

// A replicas change while quorum is lost is reported and changes nothing.
func TestScaleRefusedWithoutQuorum(t *testing.T) {
	r, _ := newReconciler(t)
	ec := testCluster()
	ec.Spec.Replicas = 5
	dir := t.TempDir()
	s := &spec.Cluster{Name: "db"}
	for _, n := range []string{"db-0", "db-1", "db-2"} {
		s.Agents = append(s.Agents, spec.Agent{Name: n})
		s.Members = append(s.Members, spec.Member{Name: n, Agent: n})
	}
	c := &cluster.Cluster{Dir: dir, Spec: s}
	st := threeMembers()
	st.Cluster.Quorate = false
	for _, want := range []int32{5, 1, 0} {
		ec.Spec.Replicas = want
		cond := r.scale(t.Context(), ec, c, st)
		if cond.Type != ConditionScaled || cond.Status != metav1.ConditionFalse || cond.Reason != "QuorumLost" {
			t.Errorf("replicas %d: %+v", want, cond)
		}
		if len(c.Spec.Members) != 3 || len(c.Spec.Agents) != 3 {
			t.Errorf("replicas %d: the spec changed: %+v", want, c.Spec)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("replicas %d: wrote %v", want, ents)
		}
	}
}

func TestStatusFromHibernated(t *testing.T) {
	ec := testCluster()
	ec.Spec.Replicas = 0
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	prev := StatusFrom(testCluster(), v1alpha1.EtcdClusterStatus{}, Observed{Status: threeMembers()}, t0)
	sc := metav1.Condition{Type: ConditionScaled, Status: metav1.ConditionTrue, Reason: "Hibernated", Message: "hibernated"}
	st := StatusFrom(ec, prev, Observed{Hibernated: true, Scaled: &sc, Volumes: VolumesCondition(nil)}, t0.Add(time.Minute))
	if st.Replicas != 0 || st.ReadyReplicas != 0 || len(st.Members) != 3 {
		t.Errorf("status %+v", st)
	}
	for _, m := range st.Members {
		if m.Ready || m.Reason != "Hibernated" || m.ID == "" {
			t.Errorf("member %+v: want its ID kept, not ready, Hibernated", m)
		}
	}
	for _, typ := range []string{"Ready", "AllMembersReady", ConditionScaled} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Reason != "Hibernated" {
			t.Errorf("condition %s: %+v, want reason Hibernated", typ, c)
		}
	}
}
