package operator

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
)

// The manager's cache holds only the Secrets (and the other watched
// kinds) the operator made; Secrets, claims, ServiceAccounts, Roles,
// RoleBindings and Leases are read uncached.
func TestCacheOptionsOwnSecretsOnly(t *testing.T) {
	ec := testCluster()
	co, cl := cacheOptions("")
	var secretSel labels.Selector
	for o, b := range co.ByObject {
		if _, ok := o.(*corev1.Secret); ok {
			secretSel = b.Label
		}
	}
	if secretSel == nil {
		t.Fatal("the cache holds every Secret of the cluster: no label selector for Secrets")
	}
	if !secretSel.Matches(labels.Set(Secret(ec, "db-join", nil).Labels)) {
		t.Errorf("selector %s does not match the operator's own Secrets", secretSel)
	}
	if secretSel.Matches(labels.Set{"app": "other"}) || secretSel.Matches(labels.Set{}) {
		t.Errorf("selector %s matches other applications' Secrets", secretSel)
	}
	if len(co.ByObject) != 4 {
		t.Errorf("cache by object: %d kinds, want the 4 watched ones (Secret, StatefulSet, Service, PodDisruptionBudget)", len(co.ByObject))
	}
	if cl.Cache == nil {
		t.Fatal("no client cache options: every read goes through the cache")
	}
	kinds := map[string]bool{}
	for _, o := range cl.Cache.DisableFor {
		kinds[typeName(o)] = true
	}
	for _, k := range []string{"Secret", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "Lease"} {
		if !kinds[k] {
			t.Errorf("%s is read through the cache (cluster-wide list and watch): want it uncached", k)
		}
	}
	if co, _ := cacheOptions("prod"); len(co.DefaultNamespaces) != 1 {
		t.Errorf("namespace prod: default namespaces %v", co.DefaultNamespaces)
	}
}

func typeName(o client.Object) string {
	t := reflect.TypeOf(o)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// The ClusterRole make generate writes grants what the code uses: no
// delete, patch or deletecollection anywhere, no list or watch on the
// kinds read uncached, nothing on pods (the operator's own pod is read
// through the Role of its namespace).
func TestClusterRoleLeastPrivilege(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "deploy", "operator", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	uncachedRes := map[string]bool{"persistentvolumeclaims": true, "serviceaccounts": true, "roles": true, "rolebindings": true, "leases": true}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v == "delete" || v == "patch" && !slices.Contains(r.Resources, "events") || v == "deletecollection" || v == "*" {
				t.Errorf("the ClusterRole grants %s on %v", v, r.Resources)
			}
			for _, res := range r.Resources {
				if uncachedRes[res] && (v == "list" || v == "watch") {
					t.Errorf("the ClusterRole grants %s on %s, which the operator reads uncached", v, res)
				}
				if res == "pods" {
					t.Errorf("the ClusterRole grants %s on pods", v)
				}
				if res == "etcdclusters" && v != "get" && v != "list" && v != "watch" {
					t.Errorf("the ClusterRole grants %s on etcdclusters: the operator writes only their status", v)
				}
			}
		}
	}
}

// The Secrets published in the cluster's namespace hold no key of the CA
// (it stays in the operator's directory): NAME-ca the certificate only,
// NAME-backup-key the cluster backup key only; NAME-client-tls keeps
// ca.crt, tls.crt, tls.key.
func TestSecretsPublishNoCAKey(t *testing.T) {
	ec := testCluster()
	ec.Spec.Version = ""
	dir := filepath.Join(t.TempDir(), "prod", "db")
	c, _, err := initDir(t.Context(), dir, ec, InitOptions(ec, "", "", false), progress.Func(nil))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := os.ReadFile(filepath.Join(c.CertDir(), pki.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	authKey, err := os.ReadFile(c.BackupAuthKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := IssueClientCert(t.Context(), ec, c, ClientCertDecision{Action: ClientCertIssue}); err != nil {
		t.Fatal(err)
	}
	secrets, err := Secrets(ec, c)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, s := range secrets {
		for k, v := range s.Data {
			keys[s.Name] = append(keys[s.Name], k)
			if bytes.Contains(v, bytes.TrimSpace(caKey)) {
				t.Errorf("Secret %s key %s holds the CA's private key", s.Name, k)
			}
		}
		slices.Sort(keys[s.Name])
	}
	for name, want := range map[string][]string{
		"db-ca": {"ca.crt"}, "db-backup-key": {BackupKeyKey},
		"db-client-tls": {"ca.crt", "tls.crt", "tls.key"}, "db-join": {"db-0.yaml", "db-1.yaml", "db-2.yaml"},
	} {
		if !slices.Equal(keys[name], want) {
			t.Errorf("Secret %s has keys %v, want %v", name, keys[name], want)
		}
	}
	for _, s := range secrets {
		if s.Name == "db-backup-key" {
			k, err := BackupKeyFromSecret(s.Name, s.Data)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ParseAuthKey(string(authKey))
			if err != nil || k.ID() != want.ID() {
				t.Errorf("db-backup-key holds key %s, the directory's is %s (%v)", k.ID(), want.ID(), err)
			}
		}
	}
}

// A backup key Secret without its key, or with something else than 64 hex
// digits, is refused naming the Secret and the key, never the content.
func TestBackupKeyFromSecret(t *testing.T) {
	good := strings.Repeat("ab", 32)
	if _, err := BackupKeyFromSecret("k", map[string][]byte{BackupKeyKey: []byte(good + "\n")}); err != nil {
		t.Fatal(err)
	}
	for _, data := range []map[string][]byte{
		nil, {"tls.key": []byte(good)}, {BackupKeyKey: []byte("secret-" + good[:10])}, {BackupKeyKey: []byte(good[:62])},
	} {
		_, err := BackupKeyFromSecret("k", data)
		if !errors.Is(err, ErrBackupKey) || !strings.Contains(err.Error(), "Secret k") || !strings.Contains(err.Error(), BackupKeyKey) ||
			strings.Contains(err.Error(), "secret-") {
			t.Errorf("%v: %v", data, err)
		}
	}
}

func FuzzBackupKeyFromSecret(f *testing.F) {
	f.Add([]byte(strings.Repeat("0f", 32)))
	f.Add([]byte(" " + strings.Repeat("AB", 32) + "\n"))
	f.Add([]byte("zz"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := BackupKeyFromSecret("k", map[string][]byte{BackupKeyKey: b})
		if (err == nil) == (k == nil) {
			t.Fatalf("key %v, error %v", k, err)
		}
		if err != nil && strings.Contains(err.Error(), string(b)) && len(bytes.TrimSpace(b)) > 8 {
			t.Fatalf("the error shows the content: %v", err)
		}
	})
}

// A spec.restoreFrom without a backup key Secret, or naming one that does
// not exist or lacks the key, is refused before anything is made: Ready
// False with reason RestoreNotAuthenticated, an event of that reason, no
// Steward spec, no object.
func TestRestoreWithoutBackupKeyRefused(t *testing.T) {
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("SK")}}
	noKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "prod"}, Data: map[string][]byte{"tls.key": []byte("x")}}
	for _, tc := range []struct{ secret, want string }{
		{"", "spec.restoreFrom.backupKeySecret is not set"},
		{"missing", "spec.restoreFrom.backupKeySecret missing"},
		{"other", "Secret other has no key " + BackupKeyKey},
	} {
		t.Run(tc.want, func(t *testing.T) {
			ec := testCluster()
			ec.Spec.RestoreFrom = &v1alpha1.RestoreFrom{BackupKeySecret: tc.secret,
				S3: &v1alpha1.S3{Endpoint: "http://s3.example:7070", Bucket: "etcd", Prefix: "hosts/prod", CredentialsSecret: "s3"}}
			r, cl := newReconciler(t, ec, creds, noKey)
			rec := events.NewFakeRecorder(10)
			r.Recorder = rec
			ctx := t.Context()
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "prod", Name: "db"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.EtcdCluster
			if err := cl.Get(ctx, client.ObjectKeyFromObject(ec), &got); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "RestoreNotAuthenticated" || !strings.Contains(c.Message, tc.want) {
				t.Errorf("Ready %+v, want False, RestoreNotAuthenticated, %q", c, tc.want)
			}
			if op := got.Status.LastOperation; op == nil || op.Type != "Restore" || op.State != "Failed" {
				t.Errorf("last operation %+v", op)
			}
			select {
			case e := <-rec.Events:
				if !strings.Contains(e, "Warning RestoreNotAuthenticated") {
					t.Errorf("event %q", e)
				}
			default:
				t.Error("no event")
			}
			dir := StateDir(r.Config.StateDir, &got)
			for _, f := range []string{"cluster.yaml", "pki"} {
				if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s written: %v", f, err)
				}
			}
			var ss appsv1.StatefulSetList
			var secrets corev1.SecretList
			_ = cl.List(ctx, &ss)
			_ = cl.List(ctx, &secrets)
			if len(ss.Items) != 0 || len(secrets.Items) != 2 {
				t.Errorf("%d StatefulSets, %d Secrets (the test's 2): want nothing made", len(ss.Items), len(secrets.Items))
			}
		})
	}
}

// The listing of the source store under its key: a full backup that
// authenticates lets the restore go on; manifests that all fail are
// refused as not authenticated, naming them; an empty store is a failed
// restore.
func TestSourceAuthenticated(t *testing.T) {
	ok := backup.Listing{Backups: []backup.Manifest{{ID: "full-1", Kind: backup.KindFull}}}
	if err := SourceAuthenticated(ok, "s3://b/p", "k"); err != nil {
		t.Error(err)
	}
	forged := backup.Listing{Ignored: []backup.Ignored{{Name: "full/x.json", Reason: "MAC does not verify"}}}
	err := SourceAuthenticated(forged, "s3://b/p", "k")
	if !errors.Is(err, ErrRestoreNotAuthenticated) || !strings.Contains(err.Error(), "1 manifests ignored, the first full/x.json: MAC does not verify") || !strings.Contains(err.Error(), "Secret k") {
		t.Errorf("forged: %v", err)
	}
	deltasOnly := backup.Listing{Backups: []backup.Manifest{{ID: "delta-1", Kind: backup.KindDelta}}}
	if err := SourceAuthenticated(deltasOnly, "s3://b/p", "k"); !errors.Is(err, ErrRestoreFailed) {
		t.Errorf("no full backup: %v", err)
	}
	if err := SourceAuthenticated(backup.Listing{}, "s3://b/p", "k"); !errors.Is(err, ErrRestoreFailed) || errors.Is(err, ErrRestoreNotAuthenticated) {
		t.Errorf("empty: %v", err)
	}
}

// The member pods run with the least that works: every container as
// MemberUID:MemberGID, not root (runAsNonRoot), under the runtime's
// seccomp profile, no privilege escalation, no capability, a read-only
// root file system with /tmp an emptyDir, no fsGroup (it would make the
// keys on the volume group-readable); the init container alone is root,
// with CAP_CHOWN and nothing else, and runs the prepare step on the data
// volume and the pod's own join file. The member container mounts only
// that file (an in-memory emptyDir), not the join Secret with every pod's
// keys. TestOperatorCreate reads the UIDs of the running processes.
func TestMemberSecurityContext(t *testing.T) {
	ec := testCluster()
	ec.Spec.Pod.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	ss := StatefulSet(ec, PodOptions{Image: "steward:x"})
	ps := ss.Spec.Template.Spec
	psc := ps.SecurityContext
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want seccomp RuntimeDefault", psc)
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != MemberUID || psc.RunAsGroup == nil || *psc.RunAsGroup != MemberGID ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want runAsUser %d, runAsGroup %d, runAsNonRoot", psc, MemberUID, MemberGID)
	}
	if psc != nil && (psc.FSGroup != nil || psc.FSGroupChangePolicy != nil || len(psc.SupplementalGroups) != 0) {
		t.Errorf("pod security context %+v: fsGroup or supplemental groups set", psc)
	}
	if MemberUID == 0 || MemberGID == 0 {
		t.Fatal("the member user is root")
	}
	// The effective user of a container: its own, else the pod's.
	user := func(c corev1.Container) (uid, gid int64, nonRoot bool) {
		uid, gid = -1, -1
		if psc != nil && psc.RunAsUser != nil {
			uid = *psc.RunAsUser
		}
		if psc != nil && psc.RunAsGroup != nil {
			gid = *psc.RunAsGroup
		}
		if psc != nil && psc.RunAsNonRoot != nil {
			nonRoot = *psc.RunAsNonRoot
		}
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsUser != nil {
				uid = *sc.RunAsUser
			}
			if sc.RunAsGroup != nil {
				gid = *sc.RunAsGroup
			}
			if sc.RunAsNonRoot != nil {
				nonRoot = *sc.RunAsNonRoot
			}
		}
		return uid, gid, nonRoot
	}
	locked := func(what string, sc *corev1.SecurityContext, add ...corev1.Capability) {
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
			!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, add) ||
			sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.ProcMount != nil {
			t.Errorf("%s security context %+v: want no privilege escalation, not privileged, read-only root, capabilities drop ALL add %v", what, sc, add)
		}
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 1 {
		t.Fatalf("%d containers, %d init containers: want the member and the prepare step", len(ps.Containers), len(ps.InitContainers))
	}
	member, prep := ps.Containers[0], ps.InitContainers[0]
	locked("member container", member.SecurityContext)
	if uid, gid, nonRoot := user(member); uid != MemberUID || gid != MemberGID || !nonRoot {
		t.Errorf("member container runs as %d:%d, runAsNonRoot %v", uid, gid, nonRoot)
	}
	locked("init container", prep.SecurityContext, "CHOWN")
	if uid, _, nonRoot := user(prep); uid != 0 || nonRoot {
		t.Errorf("init container runs as %d, runAsNonRoot %v: want root (chown)", uid, nonRoot)
	}
	if !slices.Equal(prep.Args, PrepareArgs()) || !slices.Contains(prep.Args, MemberOwner) || prep.Image != member.Image ||
		!reflect.DeepEqual(prep.Resources, member.Resources) {
		t.Errorf("init container %+v", prep)
	}
	if want := []string{"agent", "prepare-volume", "--owner", "65532:65532", PodStewardDir,
		"--copy", PodJoinSecretDir + "/$(POD_NAME).yaml=" + PodJoinDir + "/$(POD_NAME).yaml"}; !slices.Equal(PrepareArgs(), want) {
		t.Errorf("prepare args %q, want %q", PrepareArgs(), want)
	}

	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	mounts := func(c corev1.Container) map[string]corev1.VolumeMount {
		m := map[string]corev1.VolumeMount{}
		for _, vm := range c.VolumeMounts {
			m[vm.MountPath] = vm
		}
		return m
	}
	mm, pm := mounts(member), mounts(prep)
	if m, ok := mm["/tmp"]; !ok || vols[m.Name].EmptyDir == nil {
		t.Error("no writable /tmp (an emptyDir) under the read-only root file system")
	}
	if mm[PodStewardDir].Name != DataVolume || pm[PodStewardDir].Name != DataVolume || pm[PodStewardDir].ReadOnly {
		t.Errorf("the data volume is not mounted at %s in both containers (writable in the init one): %v, %v", PodStewardDir, mm, pm)
	}
	for _, c := range []corev1.Container{member, prep} {
		for _, m := range c.VolumeMounts {
			if vols[m.Name].Secret != nil && c.Name == "member" {
				t.Errorf("the member container mounts Secret %s (%s): want only its own join file", vols[m.Name].Secret.SecretName, m.MountPath)
			}
		}
	}
	if j := mm[PodJoinDir]; !j.ReadOnly || vols[j.Name].EmptyDir == nil || vols[j.Name].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("the member's %s is %+v (%+v): want a read-only in-memory emptyDir", PodJoinDir, j, vols[j.Name])
	}
	if j := pm[PodJoinDir]; j.Name != mm[PodJoinDir].Name || j.ReadOnly {
		t.Errorf("the init container's %s is %+v: want the member's emptyDir, writable", PodJoinDir, j)
	}
	if s := pm[PodJoinSecretDir]; !s.ReadOnly || vols[s.Name].Secret == nil || vols[s.Name].Secret.SecretName != joinSecret(ec) ||
		vols[s.Name].Secret.DefaultMode == nil || *vols[s.Name].Secret.DefaultMode != 0o400 {
		t.Errorf("the init container's %s is %+v (%+v): want the join Secret, read-only, 0400", PodJoinSecretDir, s, vols[s.Name])
	}
	if !slices.Contains(AgentArgs(), PodJoinDir+"/$(POD_NAME).yaml") {
		t.Errorf("the agent does not read its join file from %s: %q", PodJoinDir, AgentArgs())
	}
}

// The operator's Deployment (deploy/operator) runs as the member pods do:
// the operator container as 65532, not root, no capability, no privilege
// escalation, a read-only root file system, seccomp RuntimeDefault, no
// fsGroup; its init container root with CAP_CHOWN alone, making the state
// volume 65532's.
func TestOperatorDeploymentLeastPrivilege(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "deploy", "operator", "manager", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatal(err)
	}
	ps := d.Spec.Template.Spec
	psc := ps.SecurityContext
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != MemberUID || psc.RunAsGroup == nil || *psc.RunAsGroup != MemberGID ||
		psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
		psc.FSGroup != nil {
		t.Errorf("pod security context %+v", psc)
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 1 {
		t.Fatalf("%d containers, %d init containers", len(ps.Containers), len(ps.InitContainers))
	}
	op, prep := ps.Containers[0], ps.InitContainers[0]
	if sc := op.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		!reflect.DeepEqual(*sc, *MemberSecurityContext()) {
		t.Errorf("operator container security context %+v, want the member container's %+v", sc, MemberSecurityContext())
	}
	if sc := prep.SecurityContext; sc == nil || !reflect.DeepEqual(*sc, *PrepareSecurityContext()) {
		t.Errorf("init container security context %+v, want the member pods' %+v", sc, PrepareSecurityContext())
	}
	if want := []string{"agent", "prepare-volume", "--owner", MemberOwner, "/var/lib/steward-operator"}; !slices.Equal(prep.Args, want) || prep.Image != op.Image {
		t.Errorf("init container %s args %q, want %s %q", prep.Image, prep.Args, op.Image, want)
	}
	if len(prep.VolumeMounts) != 1 || prep.VolumeMounts[0].Name != "state" || prep.VolumeMounts[0].MountPath != "/var/lib/steward-operator" {
		t.Errorf("init container mounts %+v, want the state volume alone", prep.VolumeMounts)
	}
	if !reflect.DeepEqual(prep.Resources, op.Resources) {
		t.Errorf("init container resources %+v, operator's %+v", prep.Resources, op.Resources)
	}
}

// An event's message longer than the API server takes (1024 bytes: the
// event is rejected and lost) is cut, on a character boundary.
func TestEventMessage(t *testing.T) {
	if m := EventMessage("short"); m != "short" {
		t.Errorf("%q", m)
	}
	long := strings.Repeat("é", 600) // 1200 bytes
	m := EventMessage(long)
	if len(m) > MaxEventMessage || !strings.HasSuffix(m, "...") || !utf8.ValidString(m) {
		t.Errorf("%d bytes, valid %v: %q", len(m), utf8.ValidString(m), m[len(m)-10:])
	}
	rec := events.NewFakeRecorder(1)
	r := &Reconciler{Recorder: rec}
	r.event(testCluster(), corev1.EventTypeWarning, "R", "A", "%s", long)
	if e := <-rec.Events; len(e) > MaxEventMessage+len("Warning R ") {
		t.Errorf("event of %d bytes", len(e))
	}
}
