package operator

// What the operator refuses to take over (issue 29, review findings 4 and
// 5), and the member claims it reports (finding 6).
//
// Invariants, enforced here:
//   - An object the operator would make (StatefulSet, Services, Secrets,
//     PodDisruptionBudget, ServiceAccount, Role, RoleBinding, Leases) that
//     exists without this resource's UID as its controller reference is
//     never adopted or overwritten: the whole set is refused before any is
//     written (ErrNotOwned; condition reason ObjectNotOwned, an Event
//     naming each object and what to do).
//   - A member claim data-NAME-I older than the resource was made for a
//     deleted EtcdCluster of the same name (the StatefulSet makes a claim
//     only after its resource exists): its volume holds another cluster's
//     member, whose agent would refuse the new join file (the resource
//     would wait forever), and the hosts' rule is never to overwrite a data
//     dir silently. It is refused before anything is written
//     (ErrStaleClaims; reason StaleClaims), for the pods the resource
//     creates and for each pod a scale-up adds.
//   - DataVolumesReady counts the claims of the members the Steward spec
//     has (the StatefulSet's pods, hibernated ones included), not
//     spec.replicas: a scale in progress or a hibernated cluster is not
//     reported as missing or as having no claim.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/cluster"
)

// Condition and Event reasons of the refusals here.
const (
	ReasonObjectNotOwned = "ObjectNotOwned"
	ReasonStaleClaims    = "StaleClaims"
)

// ErrNotOwned refuses to take over an object the operator did not make.
var ErrNotOwned = errors.New("objects exist that this EtcdCluster does not own")

// ErrStaleClaims refuses member claims left by a deleted EtcdCluster of
// the same name.
var ErrStaleClaims = errors.New("member claims of a deleted EtcdCluster of the same name")

// ControlledBy reports whether o's controller reference names uid.
func ControlledBy(o metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.UID == uid && uid != ""
}

// ownerText says who controls o, for a refusal.
func ownerText(ec *v1alpha1.EtcdCluster, o metav1.Object) string {
	ref := metav1.GetControllerOf(o)
	switch {
	case ref == nil:
		return "it has no controller"
	case ref.Kind == "EtcdCluster" && ref.Name == ec.Name:
		return fmt.Sprintf("it belongs to a deleted EtcdCluster %s (UID %s), until Kubernetes' garbage collector removes it", ref.Name, ref.UID)
	default:
		return fmt.Sprintf("its controller is %s %s", ref.Kind, ref.Name)
	}
}

func notOwnedError(ec *v1alpha1.EtcdCluster, found []string) error {
	return fmt.Errorf("%w: %s in namespace %s: the operator never takes over or overwrites an object it did not make; "+
		"delete or rename it, or give the EtcdCluster another name; nothing was changed",
		ErrNotOwned, strings.Join(found, "; "), ec.Namespace)
}

// notOwned is the refusal of one object (apply's, when it appeared after
// foreign looked).
func notOwned(ec *v1alpha1.EtcdCluster, kind string, o client.Object) error {
	return notOwnedError(ec, []string{fmt.Sprintf("%s %s exists and %s", kind, o.GetName(), ownerText(ec, o))})
}

// foreign refuses objs when any of them exists and is not ec's. It reads
// from the API server (APIReader): the cache would not show another
// application's StatefulSet, Service or PodDisruptionBudget (it holds the
// operator's own only), and the refusal must come before anything is
// written.
func (r *Reconciler) foreign(ctx context.Context, ec *v1alpha1.EtcdCluster, objs []client.Object) error {
	var read client.Reader = r.Client
	if r.APIReader != nil {
		read = r.APIReader
	}
	var found []string
	for _, want := range objs {
		cur := want.DeepCopyObject().(client.Object)
		err := read.Get(ctx, client.ObjectKeyFromObject(want), cur)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		if !ControlledBy(cur, ec.UID) {
			kind := fmt.Sprintf("%T", want)
			kind = kind[strings.LastIndex(kind, ".")+1:]
			found = append(found, fmt.Sprintf("%s %s exists and %s", kind, want.GetName(), ownerText(ec, cur)))
		}
	}
	if len(found) > 0 {
		return notOwnedError(ec, found)
	}
	return nil
}

// claimName is member pod i's claim, data-NAME-I.
func claimName(ec *v1alpha1.EtcdCluster, i int) string { return DataVolume + "-" + PodName(ec, i) }

// StaleClaims returns, of claims, the member claims of ordinal below n
// that are older than ec: made for a deleted EtcdCluster of its name.
// Pure, for unit tests.
func StaleClaims(ec *v1alpha1.EtcdCluster, claims []corev1.PersistentVolumeClaim, n int) []string {
	if ec.CreationTimestamp.IsZero() {
		return nil
	}
	prefix := DataVolume + "-" + ec.Name + "-"
	var out []string
	for _, c := range claims {
		i, err := strconv.Atoi(strings.TrimPrefix(c.Name, prefix))
		if !strings.HasPrefix(c.Name, prefix) || err != nil || i < 0 || i >= n || c.Name != claimName(ec, i) {
			continue
		}
		if c.CreationTimestamp.Before(&ec.CreationTimestamp) {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// staleClaims refuses to make pods 0..max(spec.replicas, members)-1 of ec
// over claims a deleted resource of its name left (dir: its Steward
// directory, which says how many members it has).
func (r *Reconciler) staleClaims(ctx context.Context, ec *v1alpha1.EtcdCluster, dir string) error {
	n := int(ec.Spec.Replicas)
	if c, err := cluster.Open(dir); err == nil && c.Spec != nil && dirOwner(dir) == string(ec.UID) {
		n = max(n, len(c.Spec.Agents))
	}
	return r.staleClaimsBelow(ctx, ec, n)
}

func (r *Reconciler) staleClaimsBelow(ctx context.Context, ec *v1alpha1.EtcdCluster, n int) error {
	if n <= 0 || ec.CreationTimestamp.IsZero() {
		return nil
	}
	// Each claim is read by name (data-NAME-I, I < n): the operator's role
	// may get claims, not list them (least privilege: it never needs the
	// namespace's other claims).
	var claims []corev1.PersistentVolumeClaim
	for i := range n {
		var pvc corev1.PersistentVolumeClaim
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: ec.Namespace, Name: claimName(ec, i)}, &pvc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the member claims: %w", err)
		}
		claims = append(claims, pvc)
	}
	stale := StaleClaims(ec, claims, n)
	if len(stale) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s in namespace %s existed before this EtcdCluster was created (%s), so they hold the data of a deleted cluster; "+
		"the operator never starts a member over another cluster's data: delete those claims to start empty, "+
		"or keep them and restore the old cluster from its backups into an EtcdCluster of another name (spec.restoreFrom); nothing was changed",
		ErrStaleClaims, strings.Join(stale, ", "), ec.Namespace, ec.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"))
}

// memberClaims are the claims of the members the StatefulSet has (the
// Steward spec's hosts, and the pod being added), spec.replicas before
// the spec exists.
func memberClaims(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) []string {
	n := int(ec.Spec.Replicas)
	if c != nil && c.Spec != nil {
		n = len(c.Spec.Agents)
		if growing(c) {
			n++
		}
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, claimName(ec, i))
	}
	return out
}

// volumes reads the member claims for DataVolumesReady (c: the started
// cluster, nil before).
func (r *Reconciler) volumes(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster) metav1.Condition {
	var claims []ClaimState
	for _, name := range memberClaims(ec, c) {
		var pvc corev1.PersistentVolumeClaim
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &pvc)
		switch {
		case apierrors.IsNotFound(err):
			claims = append(claims, ClaimState{Name: name, Missing: true})
		case err != nil:
			return metav1.Condition{Type: v1alpha1.ConditionDataVolumesReady, Status: metav1.ConditionUnknown, Reason: "ClaimsUnreadable", Message: err.Error()}
		default:
			claims = append(claims, ClaimState{Name: name, Bound: pvc.Status.Phase == corev1.ClaimBound})
		}
	}
	return VolumesCondition(claims)
}
