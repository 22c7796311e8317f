package adopt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestNewPlanRefusals: what NewPlan refuses before it asks the cluster
// anything, each one refusal of its kind naming the problem: a cluster
// that is not attached, a systemd unit (not taken over yet), a member the
// spec does not know or that is adopted already, no agent on this machine,
// a flag Steward cannot keep.
func TestNewPlanRefusals(t *testing.T) {
	attached := func(edit func(*spec.Cluster)) *cluster.Cluster {
		s := &spec.Cluster{
			Name: "kube", Token: "attached-feed", Version: "3.5.35",
			External: &spec.External{CAFile: "/ca.crt", CertFile: "/c.crt", KeyFile: "/c.key", ClusterID: "feed"},
			Agents:   []spec.Agent{{Name: spec.LocalAgent, Address: "unix:///tmp/agent.sock"}},
			Members: []spec.Member{
				{Name: "m1", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380"},
				{Name: "m2", Agent: spec.LocalAgent, DataDir: "/var/lib/m2", ClientURL: "https://127.0.0.2:2379", PeerURL: "https://127.0.0.2:2380", Adopted: &spec.Adopted{}},
			},
		}
		if edit != nil {
			edit(s)
		}
		return &cluster.Cluster{Dir: t.TempDir(), Spec: s}
	}
	run := func(name string, edit func(*MemberRun)) MemberRun {
		r := MemberRun{Name: name, DataDir: "/var/lib/" + name, AdvertiseClientURLs: []string{"https://127.0.0.1:2379"},
			InitialAdvertisePeerURLs: []string{"https://127.0.0.1:2380"}, Source: Source{Kind: KindManifest, Path: "/etc/kubernetes/manifests/etcd.yaml"}}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		c    *cluster.Cluster
		run  MemberRun
		kind error
		want string
	}{
		{"not attached", attached(func(s *spec.Cluster) { s.External = nil }), run("m1", nil), ErrNotAttached, "is not attached"},
		{"a member the spec does not know", attached(nil), run("m9", nil), ErrNotThisMember, "has no member m9"},
		{"adopted already", attached(nil), run("m2", nil), ErrAdopted, "member m2 is adopted already (agent local)"},
		{"no agent on this machine", attached(func(s *spec.Cluster) { s.Agents = nil }), run("m1", nil), ErrNoAgent, "cluster kube has no agent on this machine to run member m1"},
		{"a flag Steward cannot keep", attached(nil), run("m1", func(r *MemberRun) { r.Flags = map[string]string{"unsafe-no-fsync": "true"} }),
			ErrUnsupported, "--unsafe-no-fsync"},
		{"a version the binary store lacks", attached(nil), run("m1", func(r *MemberRun) { r.Version = "3.4.99" }),
			ErrNoBinary, "runs etcd 3.4.99, which its agent would start it with"},
		{"the cluster's version when the member's is unknown", attached(func(s *spec.Cluster) { s.Version = "3.5.98" }), run("m1", nil),
			ErrNoBinary, "member m1 runs etcd 3.5.98, which its agent would start it with, but etcd 3.5.98 is not in the binary store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(t.Context(), tc.c, tc.run, time.Now())
			var r *refusal.Refusal
			if p != nil || !errors.As(err, &r) || !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewPlan = %v, %v; want a refusal of kind %v containing %q", p, err, tc.kind, tc.want)
			}
		})
	}
}

// TestNewUndoPlanRefusals: an undo needs an adoption of that member to
// undo, and one undone already is not undone twice.
func TestNewUndoPlanRefusals(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Name: "kube"}}
	if _, err := NewUndoPlan(t.Context(), c, "m1", time.Now()); !errors.Is(err, ErrNoAdoption) || !strings.Contains(err.Error(), "no adopt plan of member m1") {
		t.Errorf("undo without any plan: %v", err)
	}
	done := &plan.Plan{ID: "adopt-1", Kind: plan.KindAdopt, State: plan.RolledBack, CreatedAt: time.Now(),
		Steps: []plan.Step{{Kind: StepCheck, Member: "m1", State: plan.Done}}}
	if err := c.Plans().Save(t.Context(), done); err != nil {
		t.Fatal(err)
	}
	if _, err := NewUndoPlan(t.Context(), c, "m2", time.Now()); !errors.Is(err, ErrNoAdoption) {
		t.Errorf("undo of a member no plan adopted: %v", err)
	}
	if _, err := NewUndoPlan(t.Context(), c, "m1", time.Now()); !errors.Is(err, ErrNoAdoption) || !strings.Contains(err.Error(), "undone already") {
		t.Errorf("undo of an adoption undone already: %v", err)
	}
}
