package operator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

func newReconciler(t *testing.T, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha1.EtcdCluster{}).Build()
	r := &Reconciler{Client: cl, Config: Config{StateDir: t.TempDir(), MemberImage: "steward.etcd.io/steward:t", ClusterDomain: "cluster.local"},
		ops: map[string]*v1alpha1.Operation{}}
	return r, cl
}

// The first reconcile of a new EtcdCluster (against the API only: its pods
// never run here) writes the Steward directory and makes every object,
// owned by the resource; the status says what it waits for.
func TestReconcileCreates(t *testing.T) {
	ec := testCluster()
	ec.UID = ""
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("SK")}}
	ec.Spec.Backup = &v1alpha1.Backup{S3: &v1alpha1.S3{Endpoint: "http://s3.example:7070", Bucket: "etcd", CredentialsSecret: "s3"}}
	r, cl := newReconciler(t, ec, creds)
	ctx := t.Context()
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}})
	if err != nil || res.RequeueAfter != RequeueAfter {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(ctx, client.ObjectKeyFromObject(ec), &got); err != nil {
		t.Fatal(err)
	}
	dir := StateDir(r.Config.StateDir, &got)
	b, err := os.ReadFile(filepath.Join(dir, s3CredentialsFile))
	if err != nil || string(b) != "AWS_ACCESS_KEY_ID=AK\nAWS_SECRET_ACCESS_KEY=SK\n" {
		t.Errorf("credentials file: %q %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, s3CredentialsFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode: %v %v", st, err)
	}
	spec, err := os.ReadFile(filepath.Join(dir, "cluster.yaml"))
	if err != nil || !strings.Contains(string(spec), "podHosts: true") || !strings.Contains(string(spec), "credentialsFile: secrets/s3-credentials") ||
		strings.Contains(string(spec), "SK") {
		t.Errorf("spec: %v\n%s", err, spec)
	}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-ca"}}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-join"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-client-tls"}}, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-peer"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db-client"}}, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "db-member"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "db-member"}}, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "db-member"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-0"}}, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-2"}},
	} {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: o.GetName()}, o); err != nil {
			t.Errorf("%T %s: %v", o, o.GetName(), err)
			continue
		}
		if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != "db" || refs[0].Kind != "EtcdCluster" {
			t.Errorf("%T %s owners %v", o, o.GetName(), refs)
		}
	}
	var join, tls corev1.Secret
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-join"}, &join)
	for i := range 3 {
		if !strings.Contains(string(join.Data[JoinKey(&got, i)]), "kind: JoinFile") {
			t.Errorf("join key %s: %q", JoinKey(&got, i), join.Data[JoinKey(&got, i)])
		}
	}
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-client-tls"}, &tls)
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(tls.Data[k]) == 0 {
			t.Errorf("db-client-tls has no %s", k)
		}
	}
	st := got.Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionUnknown || !strings.Contains(c.Message, "waiting for every member pod's agent") {
		t.Errorf("Ready %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDataVolumesReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("DataVolumesReady %+v", c)
	}
	if op := st.LastOperation; op == nil || op.Type != "Create" || op.State != "Running" || !strings.Contains(op.Description, "waiting for the agents of db-0, db-1, db-2") {
		t.Errorf("last operation %+v", op)
	}
	if st.Selector != Selector(&got) || st.ObservedGeneration != got.Generation {
		t.Errorf("status %+v", st)
	}

	// A Lease its pod's agent renewed keeps the holder through the next
	// reconcile.
	var lease coordinationv1.Lease
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-1"}, &lease)
	holder := "91bc3c398fb3c146:Leader"
	lease.Spec.HolderIdentity = &holder
	if err := cl.Update(ctx, &lease); err != nil {
		t.Fatal(err)
	}

	// Again: nothing new written (the same CA), the objects kept.
	ca := join.Data
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	var join2 corev1.Secret
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-join"}, &join2)
	if string(join2.Data["db-0.yaml"]) != string(ca["db-0.yaml"]) {
		t.Error("a second reconcile wrote new join files")
	}
	_ = cl.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db-1"}, &lease)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
		t.Errorf("the reconcile overwrote the lease's holder: %v", lease.Spec.HolderIdentity)
	}
}

// A credentials Secret without its keys: the reconcile reports it (status
// and operation), writes no Steward directory, and requeues.
func TestReconcileBadSecret(t *testing.T) {
	ec := testCluster()
	ec.Spec.Backup = &v1alpha1.Backup{S3: &v1alpha1.S3{Endpoint: "http://s3.example:7070", Bucket: "etcd", CredentialsSecret: "s3"}}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"}, Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK")}}
	r, cl := newReconciler(t, ec, creds)
	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}})
	if err != nil || res.RequeueAfter != RequeueAfter {
		t.Fatalf("reconcile: %v %+v", err, res)
	}
	var got v1alpha1.EtcdCluster
	_ = cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got)
	if op := got.Status.LastOperation; op == nil || op.State != "Failed" || !strings.Contains(op.Description, "Secret s3 needs the keys AWS_SECRET_ACCESS_KEY") {
		t.Errorf("last operation %+v", op)
	}
	if _, err := os.Stat(filepath.Join(StateDir(r.Config.StateDir, ec), "cluster.yaml")); err == nil {
		t.Error("a cluster was written from a bad Secret")
	}
	var ss appsv1.StatefulSet
	if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db"}, &ss); err == nil {
		t.Error("a StatefulSet was made from a bad Secret")
	}
}

// A spec.replicas change is not handed to the StatefulSet: it keeps the
// pods of the Steward spec's members (scaling is member by member), and
// its pods are never restarted by the StatefulSet (OnDelete).
func TestReconcileKeepsMemberCount(t *testing.T) {
	ec := testCluster()
	r, cl := newReconciler(t, ec)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(t.Context(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	got.Spec.Replicas = 5
	if err := cl.Update(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var ss appsv1.StatefulSet
	if err := cl.Get(t.Context(), req.NamespacedName, &ss); err != nil {
		t.Fatal(err)
	}
	if *ss.Spec.Replicas != 3 || ss.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("statefulset replicas %d, strategy %s", *ss.Spec.Replicas, ss.Spec.UpdateStrategy.Type)
	}
	var role rbacv1.Role
	if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db-member"}, &role); err != nil || len(role.Rules[0].ResourceNames) != 3 {
		t.Errorf("role %+v %v", role.Rules, err)
	}
}

// An EtcdCluster created with replicas 0 makes nothing and says why.
func TestReconcileZeroReplicas(t *testing.T) {
	ec := testCluster()
	ec.Spec.Replicas = 0
	r, cl := newReconciler(t, ec)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	_ = cl.Get(t.Context(), req.NamespacedName, &got)
	if op := got.Status.LastOperation; op == nil || op.State != "Running" || !strings.Contains(op.Description, "spec.replicas is 0") {
		t.Errorf("last operation %+v", op)
	}
	var ss appsv1.StatefulSet
	if err := cl.Get(t.Context(), req.NamespacedName, &ss); err == nil {
		t.Error("a StatefulSet for no member")
	}
}

// TestReconcileKeepsGoingWithoutCredentials: once the cluster exists, its
// S3 credentials Secret deleted stops no reconcile (the status, the
// members, the recovery and the plans go on with the copy written before);
// a Warning event says what to fix. Before the cluster exists, the same
// Secret missing refuses the creation.
func TestReconcileKeepsGoingWithoutCredentials(t *testing.T) {
	ec := testCluster()
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("SK")}}
	ec.Spec.Backup = &v1alpha1.Backup{S3: &v1alpha1.S3{Endpoint: "http://s3.example:7070", Bucket: "etcd", CredentialsSecret: "s3"}}
	r, cl := newReconciler(t, ec, creds)
	ctx := t.Context()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, creds); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	r.Recorder = rec
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.EtcdCluster
	_ = cl.Get(ctx, req.NamespacedName, &got)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || strings.Contains(c.Message, "credentialsSecret") {
		t.Errorf("Ready %+v: the reconcile stopped at the Secret", c)
	}
	if !sawEvent(rec, "Warning BackupSecretUnusable", "spec.backup.s3.credentialsSecret s3") {
		t.Error("no Warning event for the deleted credentials Secret")
	}
	if b, err := os.ReadFile(filepath.Join(StateDir(r.Config.StateDir, &got), s3CredentialsFile)); err != nil || !strings.Contains(string(b), "AK") {
		t.Errorf("the copy written before: %q %v", b, err)
	}

	// A new cluster without its Secret: refused.
	fresh := testCluster()
	fresh.Name, fresh.UID = "db2", "uid-db2"
	fresh.Spec.Backup = ec.Spec.Backup
	r2, cl2 := newReconciler(t, fresh)
	if _, err := r2.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db2"}}); err != nil {
		t.Fatal(err)
	}
	var got2 v1alpha1.EtcdCluster
	_ = cl2.Get(ctx, types.NamespacedName{Namespace: "prod", Name: "db2"}, &got2)
	if c := meta.FindStatusCondition(got2.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status == metav1.ConditionTrue || !strings.Contains(c.Message, "credentialsSecret s3: secrets \"s3\" not found") {
		t.Errorf("a new cluster without its Secret: Ready %+v", c)
	}
}

// sawEvent drains rec and reports whether one event held every part of want.
func sawEvent(rec *events.FakeRecorder, want ...string) bool {
	saw := false
	for len(rec.Events) > 0 {
		e := <-rec.Events
		all := true
		for _, w := range want {
			all = all && strings.Contains(e, w)
		}
		saw = saw || all
	}
	return saw
}
