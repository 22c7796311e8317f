package operator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-semver/semver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/kubeimages"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/internal/ociimage"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// upgradeImageRef is the Steward image of the upgrade test: the tests'
// image plus every etcd version of the binary store at
// /opt/steward/binaries, as `make images` lays out Steward's image (the
// version swaps take their binaries from there).
const upgradeImageRef = kubeimages.StewardImage + ":e2e-operator-upgrade"

// storeVersions are the store's versions, newest of each minor line,
// oldest line first ("3.5.35", "3.6.16", "3.7.3").
func storeVersions(t *testing.T) (store string, newest []string) {
	t.Helper()
	store = os.Getenv("STEWARD_TEST_STORE")
	if store == "" {
		store = filepath.Join(harness.RepoRoot(t), ".cache", "store")
	}
	dirs, _ := filepath.Glob(filepath.Join(store, "etcd-v*"))
	byMinor := map[string]*semver.Version{}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "manifest.json")); err != nil {
			continue
		}
		v, err := semver.NewVersion(strings.TrimPrefix(filepath.Base(d), "etcd-v"))
		if err != nil {
			continue
		}
		m := fmt.Sprintf("%d.%d", v.Major, v.Minor)
		if cur := byMinor[m]; cur == nil || cur.LessThan(*v) {
			byMinor[m] = v
		}
	}
	var vs []*semver.Version
	for _, v := range byMinor {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].LessThan(*vs[j]) })
	for _, v := range vs {
		newest = append(newest, v.String())
	}
	return store, newest
}

func upgradeImage(t *testing.T, c *localkube.Cluster) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	key := c.Dir + "#upgrade"
	err, done := imageDone[key]
	if !done {
		err = buildUpgradeImage(t, c)
		imageDone[key] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return upgradeImageRef
}

func buildUpgradeImage(t *testing.T, c *localkube.Cluster) error {
	dir := filepath.Join(c.Dir, "e2e-operator-upgrade-image")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bin := filepath.Join(dir, "steward")
	if err := kubeimages.GoBuild(context.Background(), harness.RepoRoot(t), "./cmd/steward", bin); err != nil {
		return err
	}
	store, _ := storeVersions(t)
	etcdctls, _ := filepath.Glob(filepath.Join(store, "etcd-v3.6.*", "etcdctl"))
	if len(etcdctls) == 0 {
		return fmt.Errorf("no etcdctl of 3.6 in the store %s (STEWARD_TEST_STORE)", store)
	}
	files := []ociimage.File{
		{Path: "/usr/local/bin/steward", Mode: 0o755, Source: bin},
		{Path: "/usr/local/bin/etcdctl", Mode: 0o755, Source: etcdctls[len(etcdctls)-1]},
		{Path: operator.PodStewardDir, Mode: fs.ModeDir | 0o700},
		{Path: operator.PodBinaryStore, Mode: fs.ModeDir | 0o755},
		{Path: "/var/lib/steward-operator", Mode: fs.ModeDir | 0o700},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	dirs, _ := filepath.Glob(filepath.Join(store, "etcd-v*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "manifest.json")); err != nil {
			continue
		}
		files = append(files, ociimage.File{Path: path.Join(operator.PodBinaryStore, filepath.Base(d)), Mode: fs.ModeDir | 0o755})
		entries, err := os.ReadDir(d)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			mode := fs.FileMode(0o755)
			if e.Name() == "manifest.json" {
				mode = 0o644
			}
			files = append(files, ociimage.File{Path: path.Join(operator.PodBinaryStore, filepath.Base(d), e.Name()), Mode: mode, Source: filepath.Join(d, e.Name())})
		}
	}
	name, tag, _ := strings.Cut(upgradeImageRef, ":")
	tarball := filepath.Join(dir, "steward.tar")
	if _, err := ociimage.Write(context.Background(), ociimage.Spec{Name: name, Tag: tag, Files: files,
		Entrypoint: []string{"/usr/local/bin/steward"}}, tarball); err != nil {
		return err
	}
	return c.ImportImage(context.Background(), tarball)
}

// installOperatorWithState is installOperator with the operator's state
// on a claim (steward-operator-state), so that the operator's pod can be
// deleted and made again (restartOperator) with its Steward directories:
// what the Deployment of deploy/operator does.
func installOperatorWithState(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ns, image string) func() {
	t.Helper()
	root := harness.RepoRoot(t)
	kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy", "operator", "crd"))
	kubectl(t, c, "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.steward.etcd.io")
	kubectl(t, c, "apply", "-f", filepath.Join(root, "deploy", "operator", "rbac", "role.yaml"))
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "steward-operator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := "steward-operator-" + ns
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "steward-operator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "steward-operator", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "steward-operator-state"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func() {
		grace := int64(5)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "steward-operator", Labels: map[string]string{"app": "steward-operator"}},
			Spec: corev1.PodSpec{
				ServiceAccountName:            "steward-operator",
				TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{
					Name: "operator", Image: image, ImagePullPolicy: corev1.PullNever,
					Args: []string{"operator", "--state-dir", "/var/lib/steward-operator", "--namespace", ns,
						"--leader-elect", "--leader-election-namespace", ns, "--metrics-address", "0", "--health-address", ":8081",
						"--member-image", image, "--member-image-pull-policy", "Never"},
					VolumeMounts: []corev1.VolumeMount{{Name: "state", MountPath: "/var/lib/steward-operator"}},
				}},
				Volumes: []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "steward-operator-state"}}}},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create()
	t.Cleanup(func() {
		if t.Failed() {
			logs(t, cs, ns, "steward-operator")
		}
	})
	// restart deletes the operator's pod, waits until it is gone and
	// makes it again on the same claim.
	return func() {
		t.Helper()
		if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "steward-operator", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 2*time.Minute, 500*time.Millisecond, "the operator's pod gone", func() error {
			_, err := cs.CoreV1().Pods(ns).Get(t.Context(), "steward-operator", metav1.GetOptions{})
			if err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
		create()
	}
}

// serviceClients returns clientv3 clients of the cluster through its
// client Service NAME-client, as an application in the cluster connects:
// each connection is opened inside a node's network namespace (the test's
// own process is on the nodes' bridge, outside the pod and Service
// networks) to the Service's ClusterIP, which kube-proxy balances over the
// ready member pods. TLS: the Secret NAME-client-tls, verified against the
// Service's name.
func serviceClients(t *testing.T, cs *kubernetes.Clientset, c *localkube.Cluster, ec *v1alpha1.EtcdCluster, n int) []*clientv3.Client {
	t.Helper()
	ctx := t.Context()
	svc, err := cs.CoreV1().Services(ec.Namespace).Get(ctx, ec.Name+"-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(svc.Spec.ClusterIP, "2379")
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
	name := ec.Name + "-client." + ec.Namespace + ".svc"
	var out []*clientv3.Client
	for i := range n {
		netns := filepath.Join("/run/netns", c.Nodes[i%len(c.Nodes)].Netns)
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{name + ":2379"}, DialTimeout: 5 * time.Second,
			TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12},
			DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return dialInNetns(ctx, netns, target)
			})},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		out = append(out, cli)
	}
	harness.Eventually(t, time.Minute, time.Second, "a write through "+ec.Name+"-client", func() error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := out[0].Put(c, "/e2e/through-service", "ok")
		return err
	})
	return out
}

// dialInNetns opens a TCP connection from the network namespace netns: on
// a thread of its own that enters netns and is never given back to other
// goroutines (it ends with the goroutine, locked), so no other code runs
// in that namespace. The socket stays in it.
func dialInNetns(ctx context.Context, netns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("enter %s: %w", netns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// TestOperatorUpgradeRollback: spec.version takes a 3-member EtcdCluster
// made at the newest 3.5 of the store to the newest 3.7 (one plan, through
// the newest 3.6, member by member, the leader last), with the operator's
// pod deleted once mid-upgrade (the next operator resumes the plan), then
// back to 3.5 (the rollback: etcd's online downgrade), under a writer and
// the linearizability checker's clients through a Service: every
// acknowledged write present, no violation. A version the catalogue does
// not know first is refused with UpgradeInProgress=False and nothing
// changed. status.version, members[].version, lastOperation and the
// plans' Events are checked on the way.
func TestOperatorUpgradeRollback(t *testing.T) { harness.ForEachLocalKube(t, operatorUpgradeRollback) }

func operatorUpgradeRollback(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	_, vs := storeVersions(t)
	if len(vs) < 3 {
		t.Skipf("needs three minor lines in the store, has %v", vs)
	}
	from, via, to := vs[0], vs[1], vs[2]
	image := upgradeImage(t, c)
	cs, cl := clients(t, c)
	ns := namespace(t, cs, "op-upgrade")
	restartOperator := installOperatorWithState(t, c, cs, ns, image)

	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: 3, Version: from},
	}
	if err := cl.Create(t.Context(), ec); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	t.Cleanup(func() {
		if t.Failed() {
			pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
			for _, p := range pods.Items {
				logs(t, cs, ns, p.Name)
			}
			var got v1alpha1.EtcdCluster
			if err := cl.Get(context.Background(), key, &got); err == nil {
				t.Logf("status: %+v", got.Status)
			}
		}
		_ = cl.Delete(context.Background(), ec)
	})
	// get reads the resource; whenever its members run different
	// versions, status.version must be empty.
	mixedSeen := 0
	get := func() (*v1alpha1.EtcdCluster, error) {
		var got v1alpha1.EtcdCluster
		if err := cl.Get(t.Context(), key, &got); err != nil {
			return nil, err
		}
		versions := map[string]bool{}
		for _, m := range got.Status.Members {
			versions[m.Version] = true
		}
		if len(versions) > 1 {
			mixedSeen++
			if got.Status.Version != "" {
				t.Errorf("status.version %q while the members run %v", got.Status.Version, got.Status.Members)
			}
		}
		return &got, nil
	}
	// settled waits for every member Ready on version v, no plan left.
	settled := func(timeout time.Duration, v string) *v1alpha1.EtcdCluster {
		var got *v1alpha1.EtcdCluster
		harness.Eventually(t, timeout, 2*time.Second, "every member ready on "+v, func() error {
			var err error
			if got, err = get(); err != nil {
				return err
			}
			st := got.Status
			if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAllMembersReady) {
				return fmt.Errorf("AllMembersReady not True: %+v (last operation %+v)", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAllMembersReady), st.LastOperation)
			}
			if up := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionUpgradeInProgress); up == nil || up.Status != metav1.ConditionFalse {
				return fmt.Errorf("UpgradeInProgress %+v", up)
			}
			if st.Version != v || len(st.Members) != 3 {
				return fmt.Errorf("version %q, members %+v", st.Version, st.Members)
			}
			for _, m := range st.Members {
				if m.Version != v {
					return fmt.Errorf("member %s on %s", m.Name, m.Version)
				}
			}
			return nil
		})
		return got
	}
	settled(8*time.Minute, from)
	setVersion := func(v string) {
		t.Helper()
		got, err := get()
		if err != nil {
			t.Fatal(err)
		}
		got.Spec.Version = v
		if err := cl.Update(t.Context(), got); err != nil {
			t.Fatal(err)
		}
	}

	// A version the catalogue does not know: refused, nothing changed.
	setVersion("3.99.0")
	harness.Eventually(t, time.Minute, time.Second, "3.99.0 refused", func() error {
		got, err := get()
		if err != nil {
			return err
		}
		up := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionUpgradeInProgress)
		if up == nil || up.Status != metav1.ConditionFalse || up.Reason != "UpgradeRefused" || up.ObservedGeneration != got.Generation {
			return fmt.Errorf("UpgradeInProgress %+v", up)
		}
		if !strings.Contains(up.Message, "3.99.0") {
			return fmt.Errorf("message does not name the version: %q", up.Message)
		}
		return nil
	})
	if got := settled(time.Minute, from); got.Status.Version != from {
		t.Fatalf("version changed by a refused spec.version: %+v", got.Status)
	}

	clis := serviceClients(t, cs, c, ec, 5)
	w := workload.Start(t, clis[0], workload.Options{Prefix: "/e2e/upgrade-writer", Interval: 10 * time.Millisecond})
	kvs := []clientv3.KV{clis[1], clis[2], clis[3], clis[4]}
	var reports []workload.PhaseReport
	phase := func(name string, do func()) {
		lc := workload.StartLinearizable(t, kvs, workload.LinOptions{Prefix: "/e2e/lin/" + strings.ReplaceAll(name, " ", "-"), Interval: 25 * time.Millisecond})
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to run", func() error {
			if n := lc.Count(); n < 50 {
				return fmt.Errorf("%d operations returned", n)
			}
			return nil
		})
		start := time.Now()
		do()
		took := time.Since(start)
		after := lc.Count()
		harness.Eventually(t, 30*time.Second, 10*time.Millisecond, "the checker's clients to go on after "+name, func() error {
			if n := lc.Count(); n < after+50 {
				return fmt.Errorf("%d operations returned since", n-after)
			}
			return nil
		})
		res := lc.Stop()
		reports = append(reports, workload.PhaseReport{Name: name, Took: took, Result: res})
		workload.RequireLinearizable(t, name, res)
	}

	phase("upgrade "+from+" to "+to, func() {
		setVersion(to)
		// Mid-upgrade (the plan saved and running), the operator's pod
		// is deleted and made again.
		harness.Eventually(t, 5*time.Minute, 500*time.Millisecond, "the upgrade plan running", func() error {
			got, err := get()
			if err != nil {
				return err
			}
			if op := got.Status.LastOperation; op == nil || op.Type != "Upgrade" || op.State != "Running" || op.Plan == "" {
				return fmt.Errorf("last operation %+v", op)
			}
			return nil
		})
		t.Logf("deleting the operator's pod mid-upgrade")
		restartOperator()
		got := settled(12*time.Minute, to)
		if op := got.Status.LastOperation; op == nil || op.Type != "Upgrade" || op.State != "Succeeded" || !strings.HasPrefix(op.Plan, "upgrade-") || !strings.Contains(op.Description, op.Plan) {
			t.Errorf("last operation after the upgrade: %+v", op)
		}
	})
	phase("rollback to "+from, func() {
		setVersion(from)
		got := settled(12*time.Minute, from)
		if op := got.Status.LastOperation; op == nil || op.Type != "Rollback" || op.State != "Succeeded" || !strings.HasPrefix(op.Plan, "rollback-") || !strings.Contains(op.Description, op.Plan) {
			t.Errorf("last operation after the rollback: %+v", op)
		}
	})
	if mixedSeen == 0 {
		t.Logf("the status was never read while the members ran different versions")
	}
	res := w.Stop()
	workload.RequireKeys(t, clis[0], res)
	var longestAck time.Duration
	for _, l := range res.Latencies() {
		longestAck = max(longestAck, l)
	}
	t.Logf("writer through the upgrade %s -> %s -> %s (operator pod deleted once) and the rollback: %d acknowledged, %d failed writes, %d failed attempts %v, longest acknowledged write %s, longest gap between acknowledgements %s",
		from, via, to, len(res.Acked), len(res.Failed), res.FailedAttempts, res.AttemptErrors, longestAck, res.LongestGap())
	t.Logf("linearizability clients by phase:\n%s", workload.FormatReports(reports))

	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=db"})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, e := range evs.Items {
		reasons[e.Reason]++
	}
	for _, r := range []string{"UpgradeRefused", "PlanStep", "PlanResumed", "PlanDone"} {
		if reasons[r] == 0 {
			t.Errorf("no event %s: %v", r, reasons)
		}
	}
}
