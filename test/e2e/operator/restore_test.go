package operator_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// TestOperatorRestore: a cluster moves from hosts into Kubernetes and back
// through its backups. A single-host Steward cluster backs up (a full
// backup and deltas) to the local Kubernetes' S3 server; an EtcdCluster
// with spec.restoreFrom naming that prefix comes up with exactly that
// keyspace (the cluster ID kept, as a restore on hosts keeps it, new member
// IDs, the revision bumped above the hosts'), and
// event Restored; its own continuous backups (spec.backup.s3, another
// prefix) restore with `steward restore` into a new hosts cluster with
// exactly the pods' keyspace, writes made in the pods included. An
// EtcdCluster whose restoreFrom names a prefix without backups reports
// Ready False (reason RestoreFailed) and starts no member.
//
// Security (docs/operator.md): the restore authenticates the hosts'
// backups under the hosts' cluster backup key (the Secret
// restoreFrom.backupKeySecret names); an EtcdCluster naming another key
// is refused (reason RestoreNotAuthenticated, an event of that reason) with
// no object made. The member pods run with their securityContext (read-only
// root, no capability, no privilege escalation, seccomp RuntimeDefault)
// and serve, restore and back up; Secret db-ca holds the CA certificate
// only, db-backup-key the backup key only (the plugin lists the backups
// with it, and the hosts restore the pods' backups with it, authenticated).
func TestOperatorRestore(t *testing.T) {
	t.Parallel() // beside the other tests of setupShared
	harness.ForEachLocalKube(t, operatorRestore)
}

func operatorRestore(t *testing.T, c *localkube.Cluster) {
	version := harness.Versions()[1]
	const ns = "op-restore"
	image := operatorfixture.StewardImage(t, c)
	cs, cl := operatorfixture.SetupShared(t, c, ns, image)
	operatorfixture.S3Secret(t, c, cs, ns)
	ctx := t.Context()

	// Hosts: one member, continuous backups to the cluster's S3 server.
	hostsPrefix := "hosts/" + ns
	h := harness.New(t)
	h.WriteSpec(1, version, func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.S3 = &spec.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: hostsPrefix, CredentialsFile: c.S3CredentialsFile}
	})
	h.MustRun("up")
	hc := h.Client()
	for i := range 100 {
		if _, err := hc.Put(ctx, fmt.Sprintf("/moved/k%03d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	harness.BackupNow(t, h)
	var rev int64
	for i := range 50 { // deltas after the full backup: overwrites and deletes
		r, err := hc.Put(ctx, fmt.Sprintf("/moved/k%03d", i), fmt.Sprintf("w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	d, err := hc.Delete(ctx, "/moved/k099")
	if err != nil {
		t.Fatal(err)
	}
	rev = d.Header.Revision
	harness.WaitBackedUp(t, h, rev)
	want := keyspace(t, hc)
	hst := h.Status()
	hostsID, hostsMemberID := hst.Cluster.ID, hst.Members[0].ID

	// The hosts' cluster backup key, as a user hands it over; and
	// another cluster's.
	hostsKey, err := os.ReadFile(filepath.Join(h.Dir, "pki", operator.BackupKeyKey))
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string][]byte{"hosts-backup-key": hostsKey, "other-backup-key": []byte(strings.Repeat("5a", 32))} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{operator.BackupKeyKey: key}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A prefix without backups: reported, nothing starts.
	bad := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 1, Version: version, RestoreFrom: &v1alpha1.RestoreFrom{
			S3:              &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: "nothing/" + ns, CredentialsSecret: "s3"},
			BackupKeySecret: "hosts-backup-key",
		}},
	}
	// The hosts' backups under another cluster's key: not authenticated.
	forged := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 1, Version: version, RestoreFrom: &v1alpha1.RestoreFrom{
			S3:              &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: hostsPrefix, CredentialsSecret: "s3"},
			BackupKeySecret: "other-backup-key",
		}},
	}
	// The cluster moved from the hosts, with backups of its own.
	podPrefix := "pods/" + ns
	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Version: version,
			RestoreFrom: &v1alpha1.RestoreFrom{
				S3:              &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: hostsPrefix, CredentialsSecret: "s3"},
				BackupKeySecret: "hosts-backup-key",
			},
			Backup: &v1alpha1.Backup{
				S3: &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: podPrefix, CredentialsSecret: "s3"},
			}},
	}
	created := time.Now()
	operatorfixture.CreateClusters(t, cs, cl, bad, forged, ec)

	var got v1alpha1.EtcdCluster
	harness.Eventually(t, 8*time.Minute, 2*time.Second, "EtcdCluster db Ready with 3 members and a backup", func() error {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db"}, &got); err != nil {
			return err
		}
		st := got.Status
		if err := operatorfixture.ConditionsTrue(st, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady); err != nil {
			return err
		}
		if st.ReadyReplicas != 3 || st.LastBackupTime == nil {
			return fmt.Errorf("ready %d, last backup %v", st.ReadyReplicas, st.LastBackupTime)
		}
		return nil
	})
	t.Logf("restored from the hosts' backups: EtcdCluster created to Ready, AllMembersReady and BackupReady in %v (%d keys, revision %d)",
		time.Since(created).Round(time.Second), len(want), rev)
	// As `steward restore` does on hosts: the cluster ID of the backup is
	// kept (the same cluster, moved), the member IDs are the new members'.
	if got.Status.ClusterID != hostsID {
		t.Errorf("restored cluster ID %q, the hosts' %q: want it kept", got.Status.ClusterID, hostsID)
	}
	for _, m := range got.Status.Members {
		if m.ID == hostsMemberID {
			t.Errorf("member %s has the hosts' member ID %s", m.Name, m.ID)
		}
	}
	operatorfixture.RequireEvents(t, cs, ns, "db", "Restoring", "Restored", "Started")
	gotKeys, podRev := podKeyspace(t, cs, ns, image)
	if diff := keyspaceDiff(want, gotKeys); diff != "" {
		t.Fatalf("keyspace restored from the hosts' backup differs: %s", diff)
	}
	if podRev <= rev {
		t.Errorf("revision in the pods %d, the hosts' last %d: want it bumped above", podRev, rev)
	}

	checkPlugin(t, c, ns, hostsPrefix)
	checkSecurity(t, cs, ns, hostsKey)

	// Another cluster's key: refused, nothing made.
	var f v1alpha1.EtcdCluster
	harness.Eventually(t, 2*time.Minute, 2*time.Second, "EtcdCluster forged reports RestoreNotAuthenticated", func() error {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "forged"}, &f); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(f.Status.Conditions, v1alpha1.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "RestoreNotAuthenticated" {
			return fmt.Errorf("Ready %+v", cond)
		}
		return nil
	})
	if msg := meta.FindStatusCondition(f.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "other-backup-key") {
		t.Errorf("forged: Ready's message names no Secret: %s", msg)
	}
	operatorfixture.RequireEvents(t, cs, ns, "forged", "RestoreNotAuthenticated")
	if _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "forged", metav1.GetOptions{}); err == nil {
		t.Error("forged: a StatefulSet was made for a restore that does not authenticate")
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, "forged-join", metav1.GetOptions{}); err == nil {
		t.Error("forged: a join Secret was made for a restore that does not authenticate")
	}
	t.Logf("forged: %s", meta.FindStatusCondition(f.Status.Conditions, v1alpha1.ConditionReady).Message)

	// The prefix without backups: Ready False, RestoreFailed, no member.
	var b v1alpha1.EtcdCluster
	harness.Eventually(t, 4*time.Minute, 2*time.Second, "EtcdCluster bad reports RestoreFailed", func() error {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bad"}, &b); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "RestoreFailed" {
			return fmt.Errorf("Ready %+v", cond)
		}
		return nil
	})
	if b.Status.ClusterID != "" || len(b.Status.Members) != 0 || b.Status.LastOperation == nil ||
		b.Status.LastOperation.Type != "Restore" || b.Status.LastOperation.State != "Failed" {
		t.Errorf("bad: cluster ID %q, members %+v, last operation %+v: want no member started and a failed restore",
			b.Status.ClusterID, b.Status.Members, b.Status.LastOperation)
	}
	t.Logf("bad: %s", meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady).Message)

	// The other direction: writes in the pods, backed up to the pods'
	// prefix, restored by `steward restore` on hosts.
	for i := range 3 {
		operatorfixture.ClientPod(t, cs, ns, image, "put", fmt.Sprintf("/pods/k%02d", i), fmt.Sprintf("p%d", i))
	}
	want, lastRev := podKeyspace(t, cs, ns, image)
	operatorfixture.WaitBackedUp(t, c, podPrefix, lastRev, 2*time.Minute)
	h2 := harness.New(t)
	h2.WriteSpec(1, version, func(s *spec.Cluster) {
		s.Backup.S3 = &spec.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: podPrefix, CredentialsFile: c.S3CredentialsFile}
	})
	// The pods' cluster backup key, from its Secret db-backup-key (the
	// hosts' key: the same cluster, moved), authenticates the pods'
	// manifests: no --allow-unauthenticated.
	bk, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-backup-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h2.Dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h2.Dir, "pki", operator.BackupKeyKey), bk.Data[operator.BackupKeyKey], 0o600); err != nil {
		t.Fatal(err)
	}
	h2.MustRun("restore")
	h2.MustRun("up")
	back := keyspace(t, h2.Client())
	if diff := keyspaceDiff(want, back); diff != "" {
		t.Fatalf("keyspace restored on hosts from the pods' backups differs: %s", diff)
	}
}

// checkSecurity: the Secrets of db publish no CA key (db-ca holds the CA
// certificate only) and the backup key alone in db-backup-key (the hosts'
// key, which the restore authenticated with); db's member pods run with
// the securityContext the operator gives them.
func checkSecurity(t *testing.T, cs *kubernetes.Clientset, ns string, hostsKey []byte) {
	t.Helper()
	ctx := t.Context()
	ca, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Data) != 1 || len(ca.Data["ca.crt"]) == 0 {
		t.Errorf("Secret db-ca holds %d keys (want ca.crt only)", len(ca.Data))
	}
	for k, v := range ca.Data {
		if strings.Contains(string(v), "PRIVATE KEY") {
			t.Errorf("Secret db-ca key %s holds a private key", k)
		}
	}
	bk, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-backup-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bk.Data) != 1 || strings.TrimSpace(string(bk.Data[operator.BackupKeyKey])) != strings.TrimSpace(string(hostsKey)) {
		t.Errorf("Secret db-backup-key: %d keys, want the hosts' key alone under %s", len(bk.Data), operator.BackupKeyKey)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=db"})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("pods of db: %v (%d)", err, len(pods.Items))
	}
	for _, p := range pods.Items {
		psc, sc := p.Spec.SecurityContext, p.Spec.Containers[0].SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
			*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("pod %s runs with pod security context %+v, container %+v", p.Name, psc, sc)
		}
	}
}

// keyspace is every key and value of a hosts cluster.
func keyspace(t *testing.T, c *clientv3.Client) map[string]string {
	t.Helper()
	r, err := c.Get(t.Context(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// podKeyspace is every key and value of the EtcdCluster db, read through
// db-client from a pod, and the revision of the read.
func podKeyspace(t *testing.T, cs *kubernetes.Clientset, ns, image string) (map[string]string, int64) {
	t.Helper()
	out := operatorfixture.ClientPod(t, cs, ns, image, "get", "", "--from-key", "-w", "json")
	var r struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
		Kvs []struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("etcdctl get -w json: %v\n%s", err, out)
	}
	m := map[string]string{}
	for _, kv := range r.Kvs {
		m[string(kv.Key)] = string(kv.Value)
	}
	return m, r.Header.Revision
}

// backupElection is the prefix of the continuous backups' leader
// election (pkg/backupd): keys under a lease of the cluster that wrote
// them, gone once the lease expires after a restore, not user data.
const backupElection = "/steward/backup-leader/"

// keyspaceDiff says how got differs from want ("": not at all), leaving
// out the backups' election keys.
func keyspaceDiff(want, got map[string]string) string {
	want, got = maps.Clone(want), maps.Clone(got)
	for _, m := range []map[string]string{want, got} {
		maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasPrefix(k, backupElection) })
	}
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "missing "+k)
		} else if g != v {
			d = append(d, fmt.Sprintf("%s = %q, want %q", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("and %d more", len(d)-5))
	}
	return strings.Join(d, "; ")
}

// checkPlugin runs `kubectl steward` (the steward binary on the PATH as
// kubectl-steward, found by the cluster's kubectl) against db in ns.
func checkPlugin(t *testing.T, c *localkube.Cluster, ns, restoredPrefix string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.Symlink(harness.Binary(t), filepath.Join(bin, "kubectl-steward")); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), filepath.Join(c.KubeBin, "kubectl"), append([]string{"steward"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.Output()
		if err != nil {
			var se string
			if ee, ok := err.(*exec.ExitError); ok {
				se = string(ee.Stderr)
			}
			t.Fatalf("kubectl steward %s: %v\n%s%s", strings.Join(args, " "), err, out, se)
		}
		return string(out)
	}
	table := run("status", "db", "-n", ns)
	t.Logf("kubectl steward status db:\n%s", table)
	for _, want := range []string{"EtcdCluster " + ns + "/db: 3/3 ready", "restored from s3://" + c.S3Bucket + "/" + restoredPrefix,
		"db-0", "db-1", "db-2", "Leader", "AllMembersReady", "backups: "} {
		if !strings.Contains(table, want) {
			t.Errorf("kubectl steward status db: no %q", want)
		}
	}
	var v operator.View
	if err := json.Unmarshal([]byte(run("status", "db", "-n", ns, "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Name != "db" || v.Replicas != 3 || v.ReadyReplicas != 3 || len(v.Members) != 3 || v.Leader == "" || v.ClusterID == "" ||
		v.Backups == nil || v.Backups.Error != "" || len(v.Backups.Backups) == 0 || len(v.Backups.Ignored) != 0 {
		t.Errorf("kubectl steward status -o json: %+v (backups %+v)", v, v.Backups)
	}
	for _, m := range v.Backups.Backups {
		if m.ClusterID != v.ClusterID {
			t.Errorf("backup %s of cluster %s, want %s", m.ID, m.ClusterID, v.ClusterID)
		}
	}
	var bv operator.BackupsView
	if err := json.Unmarshal([]byte(run("backups", "db", "-n", ns, "-o", "json")), &bv); err != nil {
		t.Fatal(err)
	}
	if len(bv.Backups) == 0 || bv.Error != "" {
		t.Errorf("kubectl steward backups -o json: %+v", bv)
	}
	if out := run("plans", "db", "-n", ns); !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl steward plans db: %s", out)
	}
}
