package operator_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// TestOperatorCreate: the operator, a pod of the cluster, makes a
// 3-member EtcdCluster with continuous backups to the cluster's S3 server,
// spread over the three zones; it becomes Ready with AllMembersReady and
// three members with IDs and roles, and BackupReady with a last backup
// time; its pods' processes (and the operator's) run as 65532, not root,
// with no capability, and the member volumes are 65532's; a client pod
// writes and reads through NAME-client with NAME-client-tls; deleting the EtcdCluster removes its pods and keeps
// their claims.
func TestOperatorCreate(t *testing.T) {
	t.Parallel() // beside the other tests of setupShared
	harness.ForEachLocalKube(t, operatorCreate)
}

func operatorCreate(t *testing.T, c *localkube.Cluster) {
	const ns = "op-create"
	image := operatorfixture.StewardImage(t, c)
	cs, cl := operatorfixture.SetupShared(t, c, ns, image)
	operatorfixture.S3Secret(t, c, cs, ns)
	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.Backup{
			S3: &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, CredentialsSecret: "s3"},
		}},
	}
	operatorfixture.CreateClusters(t, cs, cl, ec)
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	var got v1alpha1.EtcdCluster
	harness.Eventually(t, 8*time.Minute, 2*time.Second, "EtcdCluster db Ready with AllMembersReady and 3 members", func() error {
		if err := cl.Get(t.Context(), key, &got); err != nil {
			return err
		}
		st := got.Status
		if err := operatorfixture.ConditionsTrue(st, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionDataVolumesReady, v1alpha1.ConditionBackupReady); err != nil {
			return err
		}
		if len(st.Members) != 3 || st.ReadyReplicas != 3 || st.Replicas != 3 {
			return fmt.Errorf("members %+v, replicas %d, ready %d", st.Members, st.Replicas, st.ReadyReplicas)
		}
		if st.LastBackupTime == nil {
			return fmt.Errorf("no last backup time")
		}
		return nil
	})
	st := got.Status
	leaders := 0
	for _, m := range st.Members {
		// An ID is etcd's, in hex without leading zeros as etcdctl
		// prints it (15 digits one time in 16).
		if id, err := strconv.ParseUint(m.ID, 16, 64); err != nil || id == 0 || !m.Ready || m.Version == "" || (m.Role != "Leader" && m.Role != "Member") {
			t.Errorf("member %+v", m)
		}
		if m.Role == "Leader" {
			leaders++
		}
	}
	if leaders != 1 || st.Leader == "" || st.ClusterID == "" || st.ReadyReplicasText != "3/3" ||
		st.Selector != operator.Selector(ec) || st.ObservedGeneration != got.Generation || st.Version == "" {
		t.Errorf("status %+v", st)
	}
	if st.LastOperation == nil || st.LastOperation.Type != "Create" || st.LastOperation.State != "Succeeded" {
		t.Errorf("last operation %+v", st.LastOperation)
	}

	// One member per zone.
	zoneOf := map[string]string{}
	for _, n := range c.Nodes {
		zoneOf[n.Name] = n.Zone
	}
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]bool{}
	for _, p := range pods.Items {
		zones[zoneOf[p.Spec.NodeName]] = true
	}
	if len(pods.Items) != 3 || len(zones) != 3 {
		t.Errorf("%d member pods in zones %v", len(pods.Items), zones)
	}

	// Least privilege on the nodes: each member pod's agent and etcd, and
	// the operator, run as 65532 (not root) with no capability, after
	// their init containers made the volumes theirs; the volumes hold
	// nothing of another owner.
	requireNonRoot(t, cs, ns, operator.Selector(ec), 2)
	requireNonRoot(t, cs, operatorfixture.OperatorNS, operatorfixture.OperatorPods, 1)
	member := fmt.Sprintf("%d:%d", operator.MemberUID, operator.MemberGID)
	for i := range 3 {
		if got := owners(t, volumeDir(t, cs, ns, fmt.Sprintf("data-db-%d", i))); len(got) != 1 || got[member] == 0 {
			t.Errorf("the volume of db-%d holds entries of owners %v, want %s alone", i, got, member)
		}
	}

	// A Lease per member, for its agent to renew.
	for i := range 3 {
		l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), fmt.Sprintf("db-%d", i), metav1.GetOptions{})
		if err != nil || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Name != "db" {
			t.Errorf("lease db-%d: %v", i, err)
		}
	}

	// A client writes and reads through the client Service.
	operatorfixture.ClientPod(t, cs, ns, image, "put", "/operator/e2e", "hello")
	if out := operatorfixture.ClientPod(t, cs, ns, image, "get", "/operator/e2e", "--print-value-only"); strings.TrimSpace(out) != "hello" {
		t.Errorf("read through db-client: %q", out)
	}

	// An Event for the actions.
	operatorfixture.RequireEvents(t, cs, ns, "db", "Initialized", "Started", "BackupsOn")

	// Deleting the EtcdCluster removes its pods (owner references).
	if err := cl.Delete(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 3*time.Minute, time.Second, "member pods gone", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
	for i := range 3 {
		claim := fmt.Sprintf("data-db-%d", i)
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{}); err != nil {
			t.Errorf("claim %s not kept: %v", claim, err)
		}
	}
}
