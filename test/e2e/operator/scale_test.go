package operator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// scaleCluster creates EtcdCluster db of n members in ns (no backups),
// dumps its pods and status if the test fails, and waits until it has n
// ready members.
func scaleCluster(t *testing.T, cs *kubernetes.Clientset, cl client.Client, ns string, n int32) *v1alpha1.EtcdCluster {
	t.Helper()
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.EtcdClusterSpec{Replicas: n}}
	if err := cl.Create(t.Context(), ec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
			for _, p := range pods.Items {
				t.Logf("pod %s: %s on %s %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.ContainerStatuses)
				logs(t, cs, ns, p.Name)
			}
			var got v1alpha1.EtcdCluster
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(ec), &got); err == nil {
				t.Logf("status: %+v", got.Status)
			}
		}
		_ = cl.Delete(context.Background(), ec)
	})
	waitMembers(t, cs, cl, ec, int(n), 8*time.Minute)
	return ec
}

// waitMembers waits until ec has n ready voting members, AllMembersReady,
// Scaled AsRequested and a StatefulSet of n pods, and returns its status.
func waitMembers(t *testing.T, cs *kubernetes.Clientset, cl client.Client, ec *v1alpha1.EtcdCluster, n int, timeout time.Duration) v1alpha1.EtcdClusterStatus {
	t.Helper()
	var got v1alpha1.EtcdCluster
	harness.Eventually(t, timeout, time.Second, fmt.Sprintf("EtcdCluster %s with %d ready members", ec.Name, n), func() error {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		st := got.Status
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, operator.ConditionScaled} {
			if !meta.IsStatusConditionTrue(st.Conditions, typ) {
				return fmt.Errorf("%s not True: %+v (last operation %+v)", typ, meta.FindStatusCondition(st.Conditions, typ), st.LastOperation)
			}
		}
		if len(st.Members) != n || int(st.ReadyReplicas) != n || int(st.Replicas) != n || st.ObservedGeneration != got.Generation {
			return fmt.Errorf("members %+v, replicas %d, ready %d", st.Members, st.Replicas, st.ReadyReplicas)
		}
		var ss appsv1.StatefulSet
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &ss); err != nil {
			return err
		}
		if int(*ss.Spec.Replicas) != n {
			return fmt.Errorf("StatefulSet replicas %d", *ss.Spec.Replicas)
		}
		return nil
	})
	return got.Status
}

// setReplicas changes spec.replicas (with kubectl scale when kubectlScale).
func setReplicas(t *testing.T, c *localkube.Cluster, cl client.Client, ec *v1alpha1.EtcdCluster, n int32, kubectlScale bool) {
	t.Helper()
	if kubectlScale {
		kubectl(t, c, "-n", ec.Namespace, "scale", "etcdcluster/"+ec.Name, "--replicas="+strconv.Itoa(int(n)))
		return
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
		t.Fatal(err)
	}
	got.Spec.Replicas = n
	if err := cl.Update(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
}

// serviceClient is a client of the members through the client Service
// NAME-client, as an application in the cluster has: the test process
// reaches no Service IP, so each connection is made from a node's network
// namespace (in turn), where kube-proxy's rules send it to a ready member.
// TLS from NAME-client-tls.
func serviceClient(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ec *v1alpha1.EtcdCluster) *clientv3.Client {
	t.Helper()
	ctx := t.Context()
	svc, err := cs.CoreV1().Services(ec.Namespace).Get(ctx, ec.Name+"-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(operator.ClientPort))
	sec, err := cs.CoreV1().Secrets(ec.Namespace).Get(ctx, ec.Name+"-client-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.Data["ca.crt"])
	var next atomic.Uint32
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		n := c.Nodes[int(next.Add(1))%len(c.Nodes)]
		return dialInNetns(ctx, filepath.Join("/run/netns", n.Netns), target)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + ec.Name + "-client:2379"}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)},
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: ec.Name + "-client", MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	harness.Eventually(t, time.Minute, time.Second, "a write through "+svc.Name, func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := cli.Put(wctx, "scale/probe", "x")
		if err != nil {
			// Say why: the connection or the handshake.
			conn, derr := dial(wctx, "")
			if derr != nil {
				return fmt.Errorf("%w; dial %s from a node: %v", err, target, derr)
			}
			defer conn.Close()
			tc := tls.Client(conn, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: ec.Name + "-client", MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
			if herr := tc.HandshakeContext(wctx); herr != nil {
				return fmt.Errorf("%w; TLS handshake with %s: %v", err, target, herr)
			}
		}
		return err
	})
	return cli
}

func memberIDs(st v1alpha1.EtcdClusterStatus) map[string]string {
	ids := map[string]string{}
	for _, m := range st.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

// TestOperatorScale: spec.replicas 3 -> 5 -> 3 -> 1 -> 3 (the last two by
// kubectl scale) under a writer and a linearizability check through the
// members' Service: each new member joins as a learner and is promoted,
// each leaving one (highest ordinal first) leaves etcd before its pod
// goes, its claim is kept; every acknowledged write is there.
func TestOperatorScale(t *testing.T) { harness.ForEachLocalKube(t, operatorScale) }

func operatorScale(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	image := stewardImage(t, c)
	cs, cl := clients(t, c)
	ns := namespace(t, cs, "op-scale")
	installOperator(t, c, cs, image)
	ec := scaleCluster(t, cs, cl, ns, 3)

	cli := serviceClient(t, c, cs, ec)
	w := workload.Start(t, cli, workload.Options{Prefix: "scale/w", Interval: 20 * time.Millisecond, Attempts: 3, RetryDelay: 200 * time.Millisecond})
	lin := workload.StartLinearizable(t, []clientv3.KV{cli, cli}, workload.LinOptions{Prefix: "scale/lin", Interval: 50 * time.Millisecond})

	start := time.Now()
	setReplicas(t, c, cl, ec, 5, false)
	st := waitMembers(t, cs, cl, ec, 5, 10*time.Minute)
	t.Logf("benchmark: scale 3 -> 5: %s", time.Since(start).Round(100*time.Millisecond))
	if op := st.LastOperation; op == nil || op.Type != "ScaleUp" || op.State != "Succeeded" {
		t.Errorf("last operation %+v", op)
	}
	before := memberIDs(st)

	setReplicas(t, c, cl, ec, 3, false)
	st = waitMembers(t, cs, cl, ec, 3, 5*time.Minute)
	for _, m := range st.Members {
		if m.Name == "db-3" || m.Name == "db-4" || before[m.Name] != m.ID {
			t.Errorf("after 5 -> 3: member %+v (before: %v)", m, before)
		}
	}
	setReplicas(t, c, cl, ec, 1, true)
	st = waitMembers(t, cs, cl, ec, 1, 5*time.Minute)
	if st.Members[0].Name != "db-0" || st.Members[0].ID != before["db-0"] {
		t.Errorf("after 3 -> 1: %+v", st.Members)
	}
	setReplicas(t, c, cl, ec, 3, true)
	waitMembers(t, cs, cl, ec, 3, 10*time.Minute)
	harness.Eventually(t, 2*time.Minute, time.Second, "writes after 1 -> 3", w.AckedAbove(w.Acked()+20))

	res := w.Stop()
	workload.RequireKeys(t, cli, res)
	workload.RequireLinearizable(t, "scale 3 -> 5 -> 3 -> 1 -> 3", lin.Stop())
	t.Logf("writer: %s", res)

	// The claims of the members that left are kept.
	for i := range 5 {
		claim := fmt.Sprintf("data-db-%d", i)
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{}); err != nil {
			t.Errorf("claim %s: %v", claim, err)
		}
	}
	reasons := map[string]bool{}
	if evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=db"}); err == nil {
		for _, e := range evs.Items {
			reasons[e.Reason] = true
		}
	}
	for _, r := range []string{"HostAdded", "MemberAdded", "MemberRemoved", "PodRemoved"} {
		if !reasons[r] {
			t.Errorf("no event %s: %v", r, reasons)
		}
	}
}

// TestOperatorMemberLoss: under a writer, the leader's pod deleted comes
// back with its data and the same member ID; a member whose claim and pod
// are deleted comes back empty and is rebuilt as a new member (a new ID);
// hibernation (replicas 0) stops every member and keeps the claims, and a
// wake brings back the same member IDs and every acknowledged write.
func TestOperatorMemberLoss(t *testing.T) { harness.ForEachLocalKube(t, operatorMemberLoss) }

func operatorMemberLoss(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	image := stewardImage(t, c)
	cs, cl := clients(t, c)
	ns := namespace(t, cs, "op-loss")
	installOperator(t, c, cs, image)
	ec := scaleCluster(t, cs, cl, ns, 3)
	st := waitMembers(t, cs, cl, ec, 3, time.Minute)
	ids := memberIDs(st)

	cli := serviceClient(t, c, cs, ec)
	w := workload.Start(t, cli, workload.Options{Prefix: "loss/w", Interval: 20 * time.Millisecond, Attempts: 3, RetryDelay: 200 * time.Millisecond})
	lin := workload.StartLinearizable(t, []clientv3.KV{cli, cli}, workload.LinOptions{Prefix: "loss/lin", Interval: 50 * time.Millisecond})

	// The leader's pod.
	leader := st.Leader
	pod, err := cs.CoreV1().Pods(ns).Get(t.Context(), leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 3*time.Minute, time.Second, "pod "+leader+" recreated", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), leader, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == pod.UID {
			return fmt.Errorf("not deleted yet")
		}
		return nil
	})
	st = waitMembers(t, cs, cl, ec, 3, 5*time.Minute)
	t.Logf("benchmark: a member pod deleted -> AllMembersReady: %s", time.Since(start).Round(100*time.Millisecond))
	if got := memberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs after the leader's pod came back: %v, want %v", got, ids)
	}

	// A member's volume and pod: it comes back empty and is rebuilt.
	lost := "db-1"
	claim := "data-" + lost
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), lost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 8*time.Minute, 2*time.Second, lost+" rebuilt as a new member", func() error {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		now := memberIDs(got.Status)
		if now[lost] == "" || now[lost] == ids[lost] || got.Status.ReadyReplicas != 3 ||
			!meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAllMembersReady) {
			return fmt.Errorf("members %+v (last operation %+v)", got.Status.Members, got.Status.LastOperation)
		}
		if op := got.Status.LastOperation; op == nil || op.Type != "Replace" || op.State != "Succeeded" {
			return fmt.Errorf("last operation %+v", op)
		}
		return nil
	})
	harness.Eventually(t, 2*time.Minute, time.Second, "writes after the rebuild", w.AckedAbove(w.Acked()+20))
	res := w.Stop()
	workload.RequireLinearizable(t, "leader pod deleted, member volume lost", lin.Stop())
	workload.RequireKeys(t, cli, res)
	st = waitMembers(t, cs, cl, ec, 3, time.Minute)
	ids = memberIDs(st)

	// Hibernate: no pod, the claims kept, status Hibernated.
	setReplicas(t, c, cl, ec, 0, false)
	harness.Eventually(t, 3*time.Minute, time.Second, "hibernated", func() error {
		pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, operator.ConditionScaled); c == nil || c.Reason != "Hibernated" {
			return fmt.Errorf("Scaled %+v", c)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != "Hibernated" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	for i := range 3 {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), fmt.Sprintf("data-db-%d", i), metav1.GetOptions{}); err != nil {
			t.Errorf("claim of db-%d: %v", i, err)
		}
	}

	// Wake: the same members, every acknowledged write.
	setReplicas(t, c, cl, ec, 3, false)
	st = waitMembers(t, cs, cl, ec, 3, 5*time.Minute)
	if got := memberIDs(st); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("member IDs after the wake: %v, want %v", got, ids)
	}
	harness.Eventually(t, time.Minute, time.Second, "the writes after the wake", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "loss/probe")
		return err
	})
	workload.RequireKeys(t, cli, res)
}
