package operator

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

var req = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}

// TestApplyRefusesForeign (finding 4): a Service named as the cluster's
// client Service that the operator did not make (no controller), and a
// StatefulSet of another EtcdCluster UID, are neither adopted nor
// overwritten: the reconcile refuses the whole set (Ready False, reason
// ObjectNotOwned, naming both and what to do), changes them in no way and
// makes none of the other objects.
func TestApplyRefusesForeign(t *testing.T) {
	ec := testCluster()
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db-client", Namespace: "prod", Labels: map[string]string{"app": "theirs"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	oldSS := StatefulSet(ec, PodOptions{Image: "old"})
	oldSS.OwnerReferences[0].UID = "uid-of-a-deleted-one"
	r, cl := newReconciler(t, ec, theirs, oldSS)
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(t.Context(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonObjectNotOwned ||
		!strings.Contains(c.Message, "Service db-client exists and it has no controller") ||
		!strings.Contains(c.Message, "StatefulSet db exists and it belongs to a deleted EtcdCluster db (UID uid-of-a-deleted-one)") ||
		!strings.Contains(c.Message, "delete or rename it") {
		t.Fatalf("Ready %+v", c)
	}
	var svc corev1.Service
	if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db-client"}, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.OwnerReferences) != 0 || svc.Labels["app"] != "theirs" || !reflect.DeepEqual(svc.Spec.Selector, theirs.Spec.Selector) || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("the foreign Service was changed: %+v", svc)
	}
	var ss appsv1.StatefulSet
	if err := cl.Get(t.Context(), req.NamespacedName, &ss); err != nil || ss.OwnerReferences[0].UID != "uid-of-a-deleted-one" {
		t.Errorf("the old StatefulSet was changed: %v %v", err, ss.OwnerReferences)
	}
	var sec corev1.Secret
	if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db-join"}, &sec); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret was made beside the refusal: %v", err)
	}

	// apply alone refuses too (an object that appeared after the check).
	want := ClientService(ec)
	if err := r.apply(t.Context(), ec, want); !errors.Is(err, ErrNotOwned) {
		t.Errorf("apply over a foreign Service: %v", err)
	}
}

// TestStaleClaims (finding 5): claims older than the resource, of the
// pods it makes, are a deleted cluster's.
func TestStaleClaims(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	ec := testCluster()
	ec.CreationTimestamp = metav1.NewTime(t0)
	claim := func(name string, at time.Time) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", CreationTimestamp: metav1.NewTime(at)}}
	}
	claims := []corev1.PersistentVolumeClaim{
		claim("data-db-1", t0.Add(-time.Hour)), claim("data-db-0", t0.Add(-time.Hour)),
		claim("data-db-2", t0.Add(time.Minute)), // its own
		claim("data-db-5", t0.Add(-time.Hour)),  // not one of its pods (yet)
		claim("data-db-01", t0.Add(-time.Hour)), claim("data-dbx-0", t0.Add(-time.Hour)), claim("data-db-other-0", t0.Add(-time.Hour)),
	}
	if got := StaleClaims(ec, claims, 3); !reflect.DeepEqual(got, []string{"data-db-0", "data-db-1"}) {
		t.Errorf("stale: %v", got)
	}
	if got := StaleClaims(ec, claims, 6); !reflect.DeepEqual(got, []string{"data-db-0", "data-db-1", "data-db-5"}) {
		t.Errorf("stale below 6: %v", got)
	}
	ec.CreationTimestamp = metav1.Time{}
	if got := StaleClaims(ec, claims, 3); got != nil {
		t.Errorf("no creation time: %v", got)
	}
}

// TestReconcileRefusesStaleClaims (finding 5): a resource made over the
// claim a deleted resource of its name kept is refused with reason
// StaleClaims (Ready and DataVolumesReady), the claim named with what to
// do; nothing is written (no Steward directory, no object); once the
// claim is gone it is created.
func TestReconcileRefusesStaleClaims(t *testing.T) {
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	ec := testCluster()
	ec.CreationTimestamp = metav1.NewTime(t0)
	old := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: "prod",
		CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	r, cl := newReconciler(t, ec, old)
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(t.Context(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDataVolumesReady} {
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonStaleClaims ||
			!strings.Contains(c.Message, "data-db-0 in namespace prod existed before this EtcdCluster") || !strings.Contains(c.Message, "delete those claims") {
			t.Errorf("%s %+v", typ, c)
		}
	}
	if _, err := os.Stat(StateDir(r.Config.StateDir, ec)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a Steward directory was written: %v", err)
	}
	var ss appsv1.StatefulSet
	if err := cl.Get(t.Context(), req.NamespacedName, &ss); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet was made over the old claim: %v", err)
	}
	if err := cl.Delete(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(t.Context(), req.NamespacedName, &ss); err != nil {
		t.Errorf("no StatefulSet once the claim is gone: %v", err)
	}
}

// TestVolumesFromMembers (finding 6): DataVolumesReady counts the claims
// of the members the Steward spec has, not spec.replicas: hibernated
// (replicas 0) it still reports the 3 kept claims; asked for 5 before the
// new pods exist it does not call their claims missing.
func TestVolumesFromMembers(t *testing.T) {
	ec := testCluster()
	var objs []client.Object
	for i := range 3 {
		objs = append(objs, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName(ec, i), Namespace: "prod"},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}})
	}
	r, _ := newReconciler(t, append(objs, ec)...)
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Name: "db"}}
	for i := range 3 {
		c.Spec.Agents = append(c.Spec.Agents, spec.Agent{Name: PodName(ec, i)})
	}
	for _, replicas := range []int32{0, 3, 5} {
		ec.Spec.Replicas = replicas
		v := r.volumes(t.Context(), ec, c)
		if v.Status != metav1.ConditionTrue || v.Message != "all 3 member claims bound" {
			t.Errorf("replicas %d: %+v", replicas, v)
		}
	}
	// The pod being added is one of them.
	if err := os.WriteFile(filepath.Join(c.Dir, growingFile), []byte("db-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := r.volumes(t.Context(), ec, c); v.Status != metav1.ConditionFalse || !strings.Contains(v.Message, "data-db-3 (not created yet)") {
		t.Errorf("growing: %+v", v)
	}
	// Before the spec exists: spec.replicas.
	ec.Spec.Replicas = 1
	if v := r.volumes(t.Context(), ec, nil); v.Message != "all 1 member claims bound" {
		t.Errorf("not started: %+v", v)
	}
}

// TestForeignAsksTheAPIServer: the operator's cache holds only its own
// objects of the kinds it watches, so another application's Service is
// invisible there; foreign reads through APIReader and refuses it before
// anything is written.
func TestForeignAsksTheAPIServer(t *testing.T) {
	ec := testCluster()
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-client", Namespace: "prod"}}
	cache, _ := newReconciler(t, ec)             // what the filtered cache shows: not theirs
	_, apiServer := newReconciler(t, ec, theirs) // what the API server has
	r := &Reconciler{Client: cache.Client}
	if err := r.foreign(t.Context(), ec, []client.Object{ClientService(ec)}); err != nil {
		t.Fatalf("the cache alone cannot see it (the defect this guards): %v", err)
	}
	r.APIReader = apiServer
	err := r.foreign(t.Context(), ec, []client.Object{ClientService(ec)})
	if !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "Service db-client exists and it has no controller") {
		t.Fatalf("want the Service refused through the API server: %v", err)
	}
}
