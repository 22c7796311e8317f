package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/pkg/memberlease"
	"github.com/etcd-steward/steward/test/harness"
)

// TestMemberLease: a real agent started with --lease renews its member's
// lease (DEP-01) on a real kube-apiserver (over the same Steward cluster),
// as a user allowed only to get and update that lease:
// never creating it; with MEMBERIDHEX:Leader or :Member as etcd says,
// following leader moves; through other writers' updates (conflicts); not
// while its member is stopped (the lease expires: Unknown, LeaseExpired,
// then NotReady past the grace), and again once it runs.
func TestMemberLease(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	k := e.NewKubeAPIServer()
	// The agent starts before etcd, and so before the API server and the
	// kubeconfig its Start writes: one of the test's own, with the server
	// certificate (made at start) unchecked, for a user of its own whose
	// only right is what a member pod's ServiceAccount gets (a Role made
	// below): get and update its lease.
	token := "member-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	tf, err := os.OpenFile(filepath.Join(k.Dir, "tokens.csv"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(tf, "%s,etcd-member,etcd-member\n", token)
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(k.Dir, "agent-kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: %q}
contexts:
- name: k
  context: {cluster: k, user: u}
current-context: k
`, k.URL, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	const member = "etcd-1"
	e.StartLocalAgent("--lease", "default/"+member, "--kubeconfig", kc)
	e.Up(3, version36(t))
	k.Start()
	cs := k.Clientset()
	ctx := t.Context()
	leases := cs.CoordinationV1().Leases("default")

	if _, err := cs.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-member"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: []string{member}, Verbs: []string{"get", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-member"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "etcd-member"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "etcd-member"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Never created by the agent: it says it waits for the operator's.
	harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "the agent to find no lease", func() error {
		b, _ := os.ReadFile(filepath.Join(e.Dir, "logs", "agent.log"))
		if !strings.Contains(string(b), "lease not found") {
			return fmt.Errorf("agent log has no %q", "lease not found")
		}
		return nil
	})
	if _, err := leases.Get(ctx, member, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("lease before the operator made it: %v, want not found", err)
	}
	seconds := int32(2)
	if _, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: member},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	st := e.Status()
	ms, _ := st.Member(member)
	wantRole := func(leader string) memberlease.Role {
		if leader == member {
			return memberlease.RoleLeader
		}
		return memberlease.RoleMember
	}
	renewed(t, leases, ms.ID, wantRole(st.Cluster.Leader))

	// Roles follow the leader.
	for _, to := range []string{member, "etcd-2"} {
		if e.Status().Cluster.Leader != to {
			e.MustRun("leader", "move", "--to", to)
		}
		renewed(t, leases, ms.ID, wantRole(to))
	}

	// Another writer of the lease (a label, as an operator might): the
	// agent's updates conflict and are retried; renewals go on.
	before := renewed(t, leases, ms.ID, memberlease.RoleMember).Spec.RenewTime.Time
	churn, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; churn.Err() == nil; i++ {
			l, err := leases.Get(churn, member, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if l.Labels == nil {
				l.Labels = map[string]string{}
			}
			l.Labels["churn"] = fmt.Sprint(i)
			_, _ = leases.Update(churn, l, metav1.UpdateOptions{})
		}
	})
	harness.Eventually(t, 15*time.Second, 100*time.Millisecond, "renewals through the churn", func() error {
		l, err := leases.Get(ctx, member, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(before.Add(3*time.Second)) {
			return fmt.Errorf("renewed at %v, %s since the churn began", l.Spec.RenewTime, time.Since(before))
		}
		return nil
	})
	stop()
	wg.Wait()

	// The member stopped: no renewal; the lease expires.
	e.MustRun("member", "stop", member)
	stopped := time.Now()
	var last time.Time
	harness.Eventually(t, 20*time.Second, 100*time.Millisecond, "the lease to expire", func() error {
		l, err := leases.Get(ctx, member, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = l.Spec.RenewTime.Time
		r := memberlease.MemberReadiness(true, l, time.Now(), time.Hour)
		if r.Reason != memberlease.ReasonLeaseExpired || r.Status != memberlease.StatusUnknown || r.ID != ms.ID {
			return fmt.Errorf("readiness %+v", r)
		}
		return nil
	})
	if last.After(stopped) {
		t.Errorf("renewed at %s, after the member stopped at %s", last, stopped)
	}
	l, err := leases.Get(ctx, member, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := memberlease.MemberReadiness(true, l, time.Now(), 0); r.Reason != memberlease.ReasonUnknownGracePeriodExceeded || r.Ready {
		t.Errorf("past a zero grace: %+v", r)
	}
	if r := memberlease.MemberReadiness(false, l, time.Now(), time.Hour); r.Reason != memberlease.ReasonPodNotReady {
		t.Errorf("pod not ready: %+v", r)
	}

	// Started again: renewed again.
	e.MustRun("member", "start", member)
	renewed(t, leases, ms.ID, wantRole(e.Status().Cluster.Leader))
}

// renewed waits until the lease holds id:role, renewed within its
// duration, and returns it.
func renewed(t *testing.T, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}, id string, role memberlease.Role) *coordinationv1.Lease {
	t.Helper()
	var got *coordinationv1.Lease
	harness.Eventually(t, 20*time.Second, 100*time.Millisecond, "the lease renewed as "+id+":"+string(role), func() error {
		l, err := leases.Get(t.Context(), "etcd-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		r := memberlease.MemberReadiness(true, l, time.Now(), time.Minute)
		if !r.Ready || r.ID != id || r.Role != role {
			return fmt.Errorf("readiness %+v of holder %v renewed at %v", r, deref(l.Spec.HolderIdentity), l.Spec.RenewTime)
		}
		got = l
		return nil
	})
	return got
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
