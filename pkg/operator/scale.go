package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// Membership by editing the resource (issue 29 deliverable 3): spec.replicas
// (and the scale subresource) grows and shrinks the cluster one member per
// reconcile, through pkg/membership as `steward member add|remove` does
// across hosts; 0 hibernates it.
//
// Invariants, enforced here:
//   - The StatefulSet's replicas are the number of hosts (agents) in the
//     Steward spec, never spec.replicas directly: a new pod's host and join key exist before its pod does,
//     and a leaving member is out of etcd before its pod goes
//     (StatefulSetReplicas).
//   - The hosts of the Steward spec are the pods NAME-0..NAME-(n-1):
//     growing adds the next ordinal, shrinking removes the highest.
//   - No replicas change is acted on while the cluster has no quorum: it
//     is reported in the Scaled condition (reason QuorumLost), nothing
//     changed (issue 29 deliverable 6).
//   - Hibernation is the file hibernatedFile in the Steward directory:
//     written before the StatefulSet goes to 0, removed before it comes
//     back; the members' claims, their data and the backups are kept, and
//     the Steward spec still lists every member (so a wake brings back the
//     same member IDs).

// ConditionScaled says whether etcd's members are what spec.replicas asks
// (reasons AsRequested, Scaling, Hibernated, QuorumLost, ScaleFailed).
const ConditionScaled = "Scaled"

// hibernatedFile marks a hibernated cluster: it holds the number of
// members it had.
const hibernatedFile = "operator-hibernated"

// ScaleAction is what one reconcile does about spec.replicas.
type ScaleAction string

// The scale actions, in the order DecideScale considers them.
const (
	ScaleNone      ScaleAction = ""
	ScaleWake      ScaleAction = "Wake"
	ScaleHibernate ScaleAction = "Hibernate"
	ScaleBlocked   ScaleAction = "Blocked"
	ScaleUp        ScaleAction = "ScaleUp"
	ScaleDown      ScaleAction = "ScaleDown"
)

// DecideScale is the decision table of a started cluster: want is
// spec.replicas, members the number of members in the Steward spec,
// hibernated whether hibernatedFile exists, quorate whether etcd has a
// quorum (unread while hibernated). It returns the action and, for
// ScaleUp and ScaleDown, the ordinal of the pod added or removed.
func DecideScale(want, members int, hibernated, quorate bool) (ScaleAction, int) {
	switch {
	case hibernated && want == 0:
		return ScaleNone, 0
	case hibernated:
		// Back to the size it had first; a different size is a scale
		// once it is quorate again.
		return ScaleWake, 0
	case want == members:
		return ScaleNone, 0
	case !quorate:
		return ScaleBlocked, 0
	case want == 0:
		return ScaleHibernate, 0
	case want > members:
		return ScaleUp, members
	default:
		return ScaleDown, members - 1
	}
}

// Hibernated reports whether the cluster of dir is hibernated.
func Hibernated(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, hibernatedFile))
	return err == nil
}

// StatefulSetReplicas is the StatefulSet's size for ec: the number of
// hosts of its Steward spec (spec.replicas before that spec exists), 0
// while hibernated.
func StatefulSetReplicas(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) int32 {
	if c == nil {
		return ec.Spec.Replicas
	}
	if Hibernated(c.Dir) {
		return 0
	}
	n := int32(len(c.Spec.Agents))
	if growing(c) {
		n++
	}
	return n
}

// growingFile names the pod being added before its host is in the Steward
// spec: its join file is written and its pod runs first, because a spec
// change asks every agent it names (recovery.mode auto), so the new agent
// must answer before bootstrap.AddHost can name it.
const growingFile = "operator-growing"

// growing reports whether the next pod (ordinal len(agents)) is being
// added: growingFile names it.
func growing(c *cluster.Cluster) bool {
	b, err := os.ReadFile(filepath.Join(c.Dir, growingFile))
	return err == nil && strings.TrimSpace(string(b)) == fmt.Sprintf("%s-%d", c.Spec.Name, len(c.Spec.Agents))
}

// scale carries out one step of DecideScale for a started cluster and
// returns the Scaled condition. st is the status read this reconcile (nil
// while hibernated or unreadable).
func (r *Reconciler) scale(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, st *status.Status) metav1.Condition {
	progressToLog(ctx, c)
	want, members := int(ec.Spec.Replicas), len(c.Spec.Members)
	quorate := st != nil && st.Cluster.Quorate
	act, i := DecideScale(want, members, Hibernated(c.Dir), quorate)
	cond := func(s metav1.ConditionStatus, reason, format string, args ...any) metav1.Condition {
		return metav1.Condition{Type: ConditionScaled, Status: s, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	failed := func(typ string, err error) metav1.Condition {
		r.event(ec, corev1.EventTypeWarning, "ScaleFailed", typ, "%v", err)
		r.setOp(ec, typ, "Failed", err.Error())
		return cond(metav1.ConditionFalse, "ScaleFailed", "%s: %v (retried at the next reconcile)", typ, err)
	}
	switch act {
	case ScaleNone:
		if want == 0 {
			return cond(metav1.ConditionTrue, "Hibernated", "hibernated: no member runs; the %d members' volumes and the backups are kept; set spec.replicas to %d to wake it", members, members)
		}
		if op := r.op(ec); op != nil && op.State == "Running" && (op.Type == "ScaleUp" || op.Type == "ScaleDown") {
			r.setOp(ec, op.Type, "Succeeded", fmt.Sprintf("%d members", members))
			r.event(ec, corev1.EventTypeNormal, "Scaled", op.Type, "%d members", members)
		}
		return cond(metav1.ConditionTrue, "AsRequested", "%d members, as spec.replicas asks", members)
	case ScaleBlocked:
		why := "its status could not be read"
		if st != nil {
			why = st.Unhealthy()
		}
		r.event(ec, corev1.EventTypeWarning, "ScaleRefused", "Scale", "spec.replicas %d not acted on: the cluster has no quorum (%s)", want, why)
		return cond(metav1.ConditionFalse, "QuorumLost", "spec.replicas %d not acted on: the cluster has no quorum (%s); nothing was changed: it is acted on once the cluster is quorate again", want, why)
	case ScaleHibernate:
		r.setOp(ec, "Hibernate", "Running", fmt.Sprintf("stopping the %d member pods", members))
		if err := atomicfile.WriteFile(filepath.Join(c.Dir, hibernatedFile), fmt.Appendf(nil, "%d\n", members), 0o600); err != nil {
			return failed("Hibernate", err)
		}
		if err := r.ensureObjects(ctx, ec, c); err != nil {
			return failed("Hibernate", err)
		}
		r.event(ec, corev1.EventTypeNormal, "Hibernated", "Hibernate", "the StatefulSet is at 0: every member stops with its pod; the %d claims and the backups are kept", members)
		r.setOp(ec, "Hibernate", "Succeeded", fmt.Sprintf("%d members stopped; volumes and backups kept", members))
		return cond(metav1.ConditionTrue, "Hibernated", "hibernated: no member runs; the %d members' volumes and the backups are kept; set spec.replicas to %d to wake it", members, members)
	case ScaleWake:
		r.setOp(ec, "Wake", "Running", fmt.Sprintf("bringing back the %d member pods with their data", members))
		if err := os.Remove(filepath.Join(c.Dir, hibernatedFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return failed("Wake", err)
		}
		if err := r.ensureObjects(ctx, ec, c); err != nil {
			return failed("Wake", err)
		}
		r.event(ec, corev1.EventTypeNormal, "Waking", "Wake", "the StatefulSet is back at %d: the members start from their volumes", members)
		r.setOp(ec, "Wake", "Succeeded", fmt.Sprintf("%d member pods back", members))
		return cond(metav1.ConditionFalse, "Scaling", "waking: %d member pods coming back with their data", members)
	case ScaleUp:
		return r.scaleUp(ctx, ec, c, i, failed, cond)
	default:
		return r.scaleDown(ctx, ec, c, i, failed, cond)
	}
}

// scaleUp adds pod i: its host and join key, then the StatefulSet grows,
// then (once its agent answers) the member joins as a learner through
// membership.Add, catches up and is promoted.
func (r *Reconciler) scaleUp(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, i int,
	failed func(string, error) metav1.Condition, cond func(metav1.ConditionStatus, string, string, ...any) metav1.Condition) metav1.Condition {
	name := PodName(ec, i)
	want := int(ec.Spec.Replicas)
	if _, ok := c.Spec.Agent(name); !ok {
		host := spec.Host{Name: name, Address: HostName(ec, i, r.Config.ClusterDomain)}
		if !growing(c) {
			// Never over a claim a deleted resource of this name left
			// (claims.go).
			if err := r.staleClaimsBelow(ctx, ec, i+1); err != nil {
				return failed("ScaleUp", err)
			}
			// Its join key, then its pod (StatefulSetReplicas counts it).
			r.setOp(ec, "ScaleUp", "Running", fmt.Sprintf("adding %s (%d -> %d members)", name, len(c.Spec.Members), want))
			if err := bootstrap.WriteJoin(c, spec.Agent{Name: name, Host: host.Address, Port: AgentPort}, 0); err != nil {
				return failed("ScaleUp", fmt.Errorf("join file of %s: %w", name, err))
			}
			if err := atomicfile.WriteFile(filepath.Join(c.Dir, growingFile), []byte(name+"\n"), 0o600); err != nil {
				return failed("ScaleUp", err)
			}
		}
		if err := r.ensureObjects(ctx, ec, c); err != nil {
			return failed("ScaleUp", err)
		}
		next := c.Spec.Clone()
		next.Agents = append(next.Agents, spec.Agent{Name: name, Host: host.Address, Port: AgentPort})
		ac, err := (&cluster.Cluster{Dir: c.Dir, Spec: next}).Agent(name)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = ac.Info(pctx)
			cancel()
		}
		if err != nil {
			r.setOp(ec, "ScaleUp", "Running", fmt.Sprintf("waiting for the agent of %s", name))
			return cond(metav1.ConditionFalse, "Scaling", "%d -> %d members: waiting for the agent of pod %s", len(c.Spec.Members), want, name)
		}
		if _, err := bootstrap.AddHost(ctx, c, host, AgentPort, 0); err != nil {
			return failed("ScaleUp", fmt.Errorf("add host %s: %w", name, err))
		}
		_ = os.Remove(filepath.Join(c.Dir, growingFile))
		r.event(ec, corev1.EventTypeNormal, "HostAdded", "ScaleUp", "%s is a host of the cluster; its join key is in %s", name, joinSecret(ec))
	}
	if err := r.ensureObjects(ctx, ec, c); err != nil {
		return failed("ScaleUp", err)
	}
	rt, err := c.Runtime(name)
	if err == nil {
		err = rt.Ping(ctx, 3*time.Second)
	}
	if err != nil {
		r.setOp(ec, "ScaleUp", "Running", fmt.Sprintf("waiting for the agent of %s", name))
		return cond(metav1.ConditionFalse, "Scaling", "%d -> %d members: waiting for the agent of pod %s", len(c.Spec.Members), want, name)
	}
	r.setOp(ec, "ScaleUp", "Running", fmt.Sprintf("%s joining as a learner", name))
	actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := membership.Add(actx, c, name, membership.AddOptions{Agent: name, Timeout: 4 * time.Minute}); err != nil {
		return failed("ScaleUp", fmt.Errorf("add member %s: %w", name, err))
	}
	r.event(ec, corev1.EventTypeNormal, "MemberAdded", "ScaleUp", "%s joined as a learner, caught up and was promoted", name)
	if len(c.Spec.Members) == want {
		r.setOp(ec, "ScaleUp", "Succeeded", fmt.Sprintf("%d members", want))
		return cond(metav1.ConditionTrue, "AsRequested", "%d members, as spec.replicas asks", want)
	}
	r.setOp(ec, "ScaleUp", "Running", fmt.Sprintf("%d of %d members", len(c.Spec.Members), want))
	return cond(metav1.ConditionFalse, "Scaling", "%d -> %d members", len(c.Spec.Members), want)
}

// scaleDown removes pod i's member (the highest ordinal): membership.Remove
// hands leadership away first if it leads, removes it from etcd and has its
// agent stop it and move its data dir aside; then its host leaves the
// Steward spec and the StatefulSet shrinks. Its claim is kept: nothing is
// deleted that a failed step may still need, and a later scale-up reuses
// it (the data dir was moved aside there, the member joins again as a new
// learner).
func (r *Reconciler) scaleDown(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, i int,
	failed func(string, error) metav1.Condition, cond func(metav1.ConditionStatus, string, string, ...any) metav1.Condition) metav1.Condition {
	name := PodName(ec, i)
	want := int(ec.Spec.Replicas)
	r.setOp(ec, "ScaleDown", "Running", fmt.Sprintf("removing %s (%d -> %d members)", name, len(c.Spec.Members), want))
	if _, ok := c.Spec.Member(name); ok {
		if err := membership.Remove(ctx, c, name, membership.RemoveOptions{}); err != nil {
			return failed("ScaleDown", fmt.Errorf("remove member %s: %w", name, err))
		}
		r.event(ec, corev1.EventTypeNormal, "MemberRemoved", "ScaleDown", "%s left etcd; its data dir was moved aside on its volume", name)
	}
	if _, ok := c.Spec.Agent(name); ok {
		next := c.Spec.Clone()
		next.Agents = nil
		for _, a := range c.Spec.Agents {
			if a.Name != name {
				next.Agents = append(next.Agents, a)
			}
		}
		if err := c.SaveSpec(ctx, next); err != nil {
			return failed("ScaleDown", fmt.Errorf("remove host %s from the spec: %w", name, err))
		}
	}
	if err := r.ensureObjects(ctx, ec, c); err != nil {
		return failed("ScaleDown", err)
	}
	r.event(ec, corev1.EventTypeNormal, "PodRemoved", "ScaleDown", "the StatefulSet shrank to %d; claim %s-%s is kept", len(c.Spec.Agents), DataVolume, name)
	if len(c.Spec.Members) == want {
		r.setOp(ec, "ScaleDown", "Succeeded", fmt.Sprintf("%d members", want))
		return cond(metav1.ConditionTrue, "AsRequested", "%d members, as spec.replicas asks", want)
	}
	return cond(metav1.ConditionFalse, "Scaling", "%d -> %d members", len(c.Spec.Members), want)
}

// replaceLost rebuilds the members whose pod came back on a fresh volume:
// the agent answers but has no such member while etcd still lists it
// (DEP-01: "it must first be removed and added as a new member"). It runs
// membership.Replace (remove the old ID, add a new learner, catch up,
// promote) for the first such member, and reports whether it did one.
func (r *Reconciler) replaceLost(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, st *status.Status) (bool, error) {
	if st == nil || !st.Cluster.Quorate {
		return false, nil
	}
	progressToLog(ctx, c)
	for _, m := range c.Spec.Members {
		ms, ok := st.Member(m.Name)
		if !ok || ms.Healthy {
			continue
		}
		rt, err := c.RuntimeFor(m)
		if err != nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = rt.Member(pctx, m.Name)
		cancel()
		if !memberrt.IsNotFound(err) {
			continue
		}
		r.setOp(ec, "Replace", "Running", fmt.Sprintf("%s came back without its data: removing it and adding it back as a new learner", m.Name))
		r.event(ec, corev1.EventTypeWarning, "MemberDataLost", "Replace", "%s's agent has no member %s (a new volume): rebuilding it as a new member", m.Name, m.Name)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err = membership.Replace(rctx, c, m.Name, 4*time.Minute)
		cancel()
		if err != nil {
			r.setOp(ec, "Replace", "Failed", err.Error())
			return true, fmt.Errorf("rebuild member %s: %w", m.Name, err)
		}
		r.event(ec, corev1.EventTypeNormal, "MemberReplaced", "Replace", "%s rejoined as a new member and was promoted", m.Name)
		r.setOp(ec, "Replace", "Succeeded", fmt.Sprintf("%s rebuilt as a new member", m.Name))
		return true, nil
	}
	return false, nil
}

// progressToLog sends the library's progress lines of c to the
// reconcile's log.
func progressToLog(ctx context.Context, c *cluster.Cluster) {
	if c.Progress == nil {
		c.Progress = progress.Func(func(format string, args ...any) { logf.FromContext(ctx).Info(fmt.Sprintf(format, args...)) })
	}
}
