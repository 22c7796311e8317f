package kubeupgrade

// The upgrading-kubelets steps: each node's kubelet, one node at a time,
// after the switching-emulated-version step (the point of no return) and
// before migrating-storage.
//
// Why after the point of no return: a kubelet may be older than the API
// servers, never newer (the version skew policy), so a rollback, which
// only exists before that point, never has to move a kubelet back: the
// kubelets still run the old version then. Kubernetes supports no
// kubelet downgrade either.
//
// Invariants, enforced here:
//   - one node at a time: a step returns only once its node's kubelet
//     runs the target (Node status.nodeInfo.kubeletVersion), the Node is
//     Ready, the node's planned control-plane components are ready again
//     (a restarted kubelet reports its static pods unready until their
//     probes pass), and the node is uncordoned;
//   - a node is drained before its kubelet moves across a minor
//     (kubeversion.KubeletDrain, the skew policy's "In-place minor
//     version kubelet upgrades are not supported"), through the eviction
//     API so PodDisruptionBudgets are honoured; DaemonSet pods and mirror
//     pods stay (a static pod is not evicted, and its kubelet keeps it
//     running across the restart); a pod no controller manages fails the
//     step (evicted, it would be gone for good); within a minor the node
//     is cordoned and its pods kept (containerd runs them across the
//     kubelet's restart);
//   - the plan cordons a node with one patch that also records the plan
//     (the Node annotation CordonedByAnnotation = plan ID), and uncordons
//     only a node that names it: a node cordoned before the plan (by its
//     user) is left cordoned;
//   - resumable from where the hosts are: a node whose kubelet runs the
//     target and is Ready is not switched again (only uncordoned when the
//     plan cordoned it); the agent's switch to what runs changes nothing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/internal/crashpoint"
	"github.com/etcd-steward/steward/pkg/kubeletrt"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// CordonedByAnnotation names, on a Node, the kube-upgrade plan that
// cordoned it (and will uncordon it).
const CordonedByAnnotation = "steward.etcd.io/cordoned-by"

// Crash points of the kubelet steps (internal/crashpoint):
//
//   - kube-kubelet-cordoned:HOST  after the node was cordoned (or found
//     cordoned), before its drain.
//   - kube-kubelet-drained:HOST  after the drain (or none), before the
//     switch.
//   - kube-kubelet-switched:HOST  after the agent switched the kubelet,
//     before the wait for the Node.
const (
	PointKubeletCordoned = "kube-kubelet-cordoned"
	PointKubeletDrained  = "kube-kubelet-drained"
	PointKubeletSwitched = "kube-kubelet-switched"
)

// NodeState is what the kubelet steps read of a Node.
type NodeState struct {
	KubeletVersion string
	Ready          bool
	Unschedulable  bool
	// CordonedBy is the plan that cordoned it (CordonedByAnnotation).
	CordonedBy string
}

// ErrUnmanagedPod: a drain found a pod no controller manages.
var ErrUnmanagedPod = errors.New("a pod no controller manages is on a node to drain")

// ErrNoKubelet: a host's agent does not run the host's kubelet.
var ErrNoKubelet = errors.New("agent does not run the host's kubelet")

// MissingKubeletError: a host's agent has no binary of the target's
// kubelet (the command adds how to build it).
type MissingKubeletError struct {
	Host, Agent, Version string
	// Available are the versions the agent has.
	Available []string
}

func (e *MissingKubeletError) Error() string {
	return fmt.Sprintf("host %s: its Steward agent %s has no kubelet %s binary (it has %s), which the upgrade switches the host's kubelet to: put that version's kubelet where the agent's kubelet config looks for it, then apply again",
		e.Host, e.Agent, e.Version, strings.Join(e.Available, ", "))
}

// Is makes it match ErrMissingKubelet.
func (e *MissingKubeletError) Is(target error) bool { return target == ErrMissingKubelet }

// ErrMissingKubelet is what MissingKubeletError matches.
var ErrMissingKubelet = errors.New("target kubelet binary missing on a host")

func (pl *Payload) kubelet(host string) (PlannedComponent, bool) {
	for _, k := range pl.Kubelets {
		if k.Host == host {
			return k, true
		}
	}
	return PlannedComponent{}, false
}

// kubeletStep moves host's kubelet to the target (see the invariants).
func (e *Executor) kubeletStep(ctx context.Context, id string, pl Payload, host string) error {
	pk, ok := pl.kubelet(host)
	if !ok {
		return nil
	}
	n, err := e.Env.Node(ctx, host)
	if err != nil {
		return fmt.Errorf("host %s: read its Node: %w", host, err)
	}
	if n.KubeletVersion == pk.ToVersion && n.Ready {
		e.Progress.Say("host %s: kubelet already runs %s", host, pk.ToVersion)
		return e.uncordon(ctx, id, host)
	}
	switch {
	case !n.Unschedulable:
		if err := e.Env.Cordon(ctx, host, id); err != nil {
			return fmt.Errorf("host %s: cordon its node: %w", host, err)
		}
		e.Progress.Say("host %s: node cordoned", host)
	case n.CordonedBy == id:
	default:
		e.Progress.Say("host %s: node cordoned before the plan: left cordoned after it", host)
	}
	crashpoint.Hit(PointKubeletCordoned + ":" + host)
	if pk.Drain {
		start := time.Now()
		var permanent error
		if err := e.wait(ctx, fmt.Sprintf("host %s: drained (a minor kubelet upgrade in place is unsupported)", host), func() error {
			left, err := e.Env.Evict(ctx, host)
			if errors.Is(err, ErrUnmanagedPod) {
				permanent = err
				return nil
			}
			if err != nil {
				return err
			}
			if len(left) > 0 {
				return fmt.Errorf("pods not yet gone: %s", strings.Join(left, ", "))
			}
			return nil
		}); err != nil {
			return err
		}
		if permanent != nil {
			return fmt.Errorf("host %s: %w", host, permanent)
		}
		e.Progress.Say("host %s: node drained (%.1fs)", host, time.Since(start).Seconds())
	} else {
		e.Progress.Say("host %s: pods kept (a patch upgrade of the kubelet in place)", host)
	}
	crashpoint.Hit(PointKubeletDrained + ":" + host)
	start := time.Now()
	if err := e.Env.SwitchKubelet(ctx, host, pk.ToVersion); err != nil {
		return fmt.Errorf("host %s: switch its kubelet to %s: %w", host, pk.ToVersion, err)
	}
	crashpoint.Hit(PointKubeletSwitched + ":" + host)
	if err := e.wait(ctx, fmt.Sprintf("host %s: Node Ready with kubelet %s", host, pk.ToVersion), func() error {
		n, err := e.Env.Node(ctx, host)
		switch {
		case err != nil:
			return err
		case n.KubeletVersion != pk.ToVersion:
			return fmt.Errorf("its Node reports kubelet %s", n.KubeletVersion)
		case !n.Ready:
			return errors.New("its Node is not Ready")
		}
		return nil
	}); err != nil {
		return err
	}
	// The new kubelet reports its static pods not ready until their
	// probes pass again: the node's control plane ready before the next
	// node's kubelet restarts (never two at once).
	if err := e.wait(ctx, fmt.Sprintf("host %s: its control plane ready under kubelet %s", host, pk.ToVersion), func() error {
		for _, pc := range pl.Components {
			if pc.Host != host {
				continue
			}
			check := e.upgraded
			if pl.EmulatedVersion != "" {
				check = e.switched
			}
			if err := check(ctx, pc); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	e.Progress.Say("host %s: kubelet %s, Node Ready, its static pods ready (%.1fs after the switch)", host, pk.ToVersion, time.Since(start).Seconds())
	return e.uncordon(ctx, id, host)
}

// uncordon makes host's node schedulable again when plan id cordoned it.
func (e *Executor) uncordon(ctx context.Context, id, host string) error {
	n, err := e.Env.Node(ctx, host)
	if err != nil {
		return fmt.Errorf("host %s: read its Node: %w", host, err)
	}
	if n.CordonedBy != id {
		return nil
	}
	if err := e.Env.Uncordon(ctx, host, id); err != nil {
		return fmt.Errorf("host %s: uncordon its node: %w", host, err)
	}
	e.Progress.Say("host %s: node uncordoned", host)
	return nil
}

// kubeletsAt says whether every planned kubelet runs the target on a
// Ready node: nil when so, else what lacks.
func (e *Executor) kubeletsAt(ctx context.Context, pl Payload) []error {
	var bad []error
	for _, k := range pl.Kubelets {
		n, err := e.Env.Node(ctx, k.Host)
		switch {
		case err != nil:
			bad = append(bad, fmt.Errorf("host %s: %w", k.Host, err))
		case n.KubeletVersion != k.ToVersion || !n.Ready:
			bad = append(bad, fmt.Errorf("host %s: kubelet %s (Ready %v), not %s", k.Host, n.KubeletVersion, n.Ready, k.ToVersion))
		}
	}
	return bad
}

// checkKubelets refuses, before anything is recorded, a host whose
// agent does not run its kubelet or has no binary of the target's.
func checkKubelets(ctx context.Context, agents func(host string) (string, kubeletrt.Runtime, []string, error), kubelets []PlannedComponent) error {
	for _, k := range kubelets {
		name, rt, caps, err := agents(k.Host)
		if err != nil {
			return err
		}
		if !slices.Contains(caps, capKubelet) {
			return refusal.New(ErrNoKubelet, "host %s: its Steward agent %s does not run the host's kubelet, which the upgrade switches to %s", k.Host, name, k.ToVersion)
		}
		st, err := rt.Kubelet(ctx)
		if err != nil {
			return fmt.Errorf("host %s: its kubelet through agent %s: %w", k.Host, name, err)
		}
		if !slices.Contains(st.Available, k.ToVersion) {
			me := &MissingKubeletError{Host: k.Host, Agent: name, Version: k.ToVersion, Available: st.Available}
			return refusal.New(me, "%s", me.Error())
		}
	}
	return nil
}

// capKubelet is agentapi.CapKubelet.
const capKubelet = "kubelet"

// The real Env's kubelet methods: the Node through client-go, the
// kubelet through the host's agent.

func (e *env) Node(ctx context.Context, host string) (NodeState, error) {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
	if err != nil {
		return NodeState{}, err
	}
	st := NodeState{KubeletVersion: n.Status.NodeInfo.KubeletVersion, Unschedulable: n.Spec.Unschedulable, CordonedBy: n.Annotations[CordonedByAnnotation]}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			st.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return st, nil
}

func (e *env) Cordon(ctx context.Context, host, id string) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{CordonedByAnnotation: id}},
		"spec":     map[string]any{"unschedulable": true},
	})
	_, err := e.cs.CoreV1().Nodes().Patch(ctx, host, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (e *env) Uncordon(ctx context.Context, host, id string) error {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Annotations[CordonedByAnnotation] != id {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{CordonedByAnnotation: nil}, "resourceVersion": n.ResourceVersion},
		"spec":     map[string]any{"unschedulable": false},
	})
	_, err = e.cs.CoreV1().Nodes().Patch(ctx, host, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Evict asks the eviction API to evict every pod on host a drain moves
// and returns those still there (terminating, or refused for now by a
// PodDisruptionBudget).
func (e *env) Evict(ctx context.Context, host string) ([]string, error) {
	pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + host})
	if err != nil {
		return nil, err
	}
	var left []string
	for _, p := range pods.Items {
		name := p.Namespace + "/" + p.Name
		switch {
		case !Drained(p):
			continue
		case len(p.OwnerReferences) == 0:
			return nil, refusal.New(ErrUnmanagedPod, "pod %s is managed by no controller: evicted, it would be gone for good; delete it or give it a controller, then resume the plan", name)
		case p.DeletionTimestamp != nil:
			left = append(left, name+" (terminating)")
			continue
		}
		err := e.cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case err == nil:
			left = append(left, name+" (evicted)")
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			left = append(left, name+" (a PodDisruptionBudget allows no disruption now)")
		default:
			left = append(left, fmt.Sprintf("%s (eviction: %v)", name, err))
		}
	}
	return left, nil
}

// Drained says whether a drain evicts the pod: not a mirror pod (a
// static pod stays with its kubelet), not a DaemonSet's (its controller
// would put it back), not finished.
func Drained(p corev1.Pod) bool {
	if _, ok := p.Annotations[MirrorAnnotation]; ok {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (e *env) SwitchKubelet(ctx context.Context, host, version string) error {
	name, err := e.agentName(host)
	if err != nil {
		return err
	}
	ac, err := e.c.Agent(name)
	if err != nil {
		return err
	}
	_, err = ac.SwitchKubelet(ctx, version)
	return err
}
