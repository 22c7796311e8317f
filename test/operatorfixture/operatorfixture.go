// Package operatorfixture is Steward's operator in a local Kubernetes, for
// the tests and benchmarks that run it (test/e2e/operator,
// test/bench/operator): the Steward images built from this checkout and
// imported into the nodes, the operator's installation from deploy/operator
// (one per test, Setup, or shared by the tests running at once,
// SetupShared) and killing its pod, namespaces and EtcdClusters that clean
// up after themselves and the waits for their conditions, clients through
// NAME-client (pods running etcdctl, and clientv3 from the nodes' network
// namespaces), the writer and the linearizability checker, Events, member
// pods and volumes deleted, and the operator pod's resource use read from
// its cgroup.
//
// The local Kubernetes itself is the caller's: its package's TestMain
// brings it up (harness.LocalKubeMain and its variants) and passes it to
// these functions (harness.LocalKube). Every function takes the test or
// benchmark (testing.TB) and fails it on an error; what it creates is
// removed when that test or benchmark ends.
package operatorfixture

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-semver/semver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/kubeimages"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/internal/ociimage"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// The Steward images the tests build from this checkout, laid out as `make
// images` lays out Steward's image: ImageRef has the static steward and
// the store's etcdctl; UpgradeImageRef also every etcd version of the
// binary store at /opt/steward/binaries (the version swaps take their
// binaries from there).
const (
	ImageRef        = kubeimages.StewardImage + ":e2e-operator"
	UpgradeImageRef = kubeimages.StewardImage + ":e2e-operator-upgrade"
)

var (
	imageMu   sync.Mutex
	imageDone = map[string]error{} // cluster dir + image -> build and import result
)

// StewardImage builds ImageRef once per cluster and imports it into every
// node.
func StewardImage(tb testing.TB, c *localkube.Cluster) string { return image(tb, c, ImageRef) }

// UpgradeImage builds UpgradeImageRef once per cluster and imports it
// into every node.
func UpgradeImage(tb testing.TB, c *localkube.Cluster) string { return image(tb, c, UpgradeImageRef) }

func image(tb testing.TB, c *localkube.Cluster, ref string) string {
	tb.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	key := c.Dir + "#" + ref
	err, done := imageDone[key]
	if !done {
		err = buildImage(tb, c, ref, ref == UpgradeImageRef)
		imageDone[key] = err
	}
	if err != nil {
		tb.Fatal(err)
	}
	return ref
}

// buildImage writes the image ref (with the store's etcd versions when
// withStore) and imports it into every node.
func buildImage(tb testing.TB, c *localkube.Cluster, ref string, withStore bool) error {
	name, tag, _ := strings.Cut(ref, ":")
	dir := filepath.Join(c.Dir, "e2e-image-"+tag)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bin := filepath.Join(dir, "steward")
	if err := kubeimages.GoBuild(context.Background(), harness.RepoRoot(tb), "./cmd/steward", bin); err != nil {
		return err
	}
	store, _ := StoreVersions(tb)
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
	if withStore {
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
	}
	tarball := filepath.Join(dir, "steward.tar")
	if _, err := ociimage.Write(context.Background(), ociimage.Spec{Name: name, Tag: tag, Files: files,
		Entrypoint: []string{"/usr/local/bin/steward"}}, tarball); err != nil {
		return err
	}
	return c.ImportImage(context.Background(), tarball)
}

// StoreVersions are the store's versions, newest of each minor line,
// oldest line first ("3.5.35", "3.6.16", "3.7.3").
func StoreVersions(tb testing.TB) (store string, newest []string) {
	tb.Helper()
	store = os.Getenv("STEWARD_TEST_STORE")
	if store == "" {
		store = filepath.Join(harness.RepoRoot(tb), ".cache", "store")
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

// Setup is the start of every test that runs the operator: three nodes (else
// skipped), the image, the clients, the test's namespace ns, and the
// operator installed with that image for the test alone (removed when it
// ends): a test that kills the operator, drains nodes or reads the
// operator's metrics as its own runs with it, one at a time.
func Setup(tb testing.TB, c *localkube.Cluster, ns, image string) (*kubernetes.Clientset, client.Client) {
	tb.Helper()
	if len(c.Nodes) < 3 {
		tb.Skip("needs three nodes")
	}
	cs, cl := Clients(tb, c)
	Namespace(tb, cs, ns)
	InstallOperator(tb, c, cs, image)
	return cs, cl
}

// SetupShared is setup for a test that runs beside others (tb.Parallel):
// one installation of the operator serves every such test running at
// once, made by the first and removed when the last ends. Go starts the
// parallel tests after every sequential one has ended, so the sequential
// tests' installations (setup) never meet a shared one. The test must
// leave the operator alone (no kill, no drain, no metric read as the
// operator's total) and work only in its namespace ns.
func SetupShared(tb testing.TB, c *localkube.Cluster, ns, image string) (*kubernetes.Clientset, client.Client) {
	tb.Helper()
	if len(c.Nodes) < 3 {
		tb.Skip("needs three nodes")
	}
	cs, cl := Clients(tb, c)
	Namespace(tb, cs, ns)
	sharedOperator.Lock()
	defer sharedOperator.Unlock()
	switch {
	case sharedOperator.users == 0:
		sharedOperator.image, sharedOperator.remove = ApplyOperator(tb, c, image)
	case sharedOperator.image != image:
		tb.Fatalf("the shared operator runs %s, this test wants %s: tests that share it use one image", sharedOperator.image, image)
	}
	sharedOperator.users++
	tb.Cleanup(func() {
		if tb.Failed() {
			pods, _ := cs.CoreV1().Pods(OperatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: OperatorPods})
			for _, p := range pods.Items {
				Logs(tb, cs, OperatorNS, p.Name)
			}
		}
		sharedOperator.Lock()
		defer sharedOperator.Unlock()
		if sharedOperator.users--; sharedOperator.users == 0 {
			sharedOperator.remove(tb)
		}
	})
	return cs, cl
}

// sharedOperator is the installation SetupShared's tests share; its mutex
// guards the fields (the tests run in parallel).
var sharedOperator struct {
	sync.Mutex
	users  int                 // tests using it
	image  string              // its image
	remove func(tb testing.TB) // deletes it (set with users going 0 -> 1)
}

// Clients returns a clientset and a controller-runtime client (with the
// EtcdCluster type) of the admin's kubeconfig.
func Clients(tb testing.TB, c *localkube.Cluster) (*kubernetes.Clientset, client.Client) {
	tb.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	return cs, cl
}

// Kubectl runs the cluster's kubectl with args and returns its output;
// an error fails the test.
func Kubectl(tb testing.TB, c *localkube.Cluster, args ...string) string {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// OperatorNS is the operator's namespace in deploy/operator, and
// OperatorPods the selector of its pods.
const (
	OperatorNS   = "steward-system"
	OperatorPods = "app.kubernetes.io/name=steward-operator"
)

// InstallOperator installs the operator as a user does, `kubectl apply -k
// deploy/operator` (the namespace steward-system, the CRD, the generated
// ClusterRole and its binding, the state volume, the Deployment), with the
// tests' image in place of the base's, and removes it when the test ends.
func InstallOperator(tb testing.TB, c *localkube.Cluster, cs *kubernetes.Clientset, image string) {
	tb.Helper()
	_, remove := ApplyOperator(tb, c, image)
	tb.Cleanup(func() {
		if tb.Failed() {
			pods, _ := cs.CoreV1().Pods(OperatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: OperatorPods})
			for _, p := range pods.Items {
				Logs(tb, cs, OperatorNS, p.Name)
			}
		}
		remove(tb)
	})
}

// ApplyOperator applies deploy/operator with image and waits for the CRD
// and the Deployment; it returns the image and what removes it all.
func ApplyOperator(tb testing.TB, c *localkube.Cluster, image string) (string, func(tb testing.TB)) {
	tb.Helper()
	base := filepath.Join(harness.RepoRoot(tb), "deploy", "operator")
	out := Kubectl(tb, c, "kustomize", base)
	const baseImage = kubeimages.StewardImage + ":latest"
	if !strings.Contains(out, "image: "+baseImage) {
		tb.Fatalf("kustomize %s names no image %s:\n%s", base, baseImage, out)
	}
	// Not the test's TempDir: a shared installation outlives the test
	// that made it; removed with it.
	dir, err := os.MkdirTemp("", "steward-operator-")
	if err != nil {
		tb.Fatal(err)
	}
	manifest := filepath.Join(dir, "operator.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(out, baseImage, image)), 0o600); err != nil {
		tb.Fatal(err)
	}
	remove := func(tb testing.TB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Kubectl(ctx, "delete", "--ignore-not-found", "-f", manifest).Run()
		_ = os.RemoveAll(dir)
	}
	// What was applied is removed if the test fails here (tb.Fatal ends
	// the goroutine, running the deferred call): no caller holds remove.
	applied := false
	defer func() {
		if !applied {
			remove(tb)
		}
	}()
	Kubectl(tb, c, "apply", "-f", manifest)
	Kubectl(tb, c, "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.steward.etcd.io")
	Kubectl(tb, c, "-n", OperatorNS, "rollout", "status", "deployment/steward-operator", "--timeout=3m")
	applied = true
	return image, remove
}

// OperatorPod is the operator's one pod that is not being deleted.
func OperatorPod(tb testing.TB, cs *kubernetes.Clientset) (*corev1.Pod, error) {
	tb.Helper()
	pods, err := cs.CoreV1().Pods(OperatorNS).List(tb.Context(), metav1.ListOptions{LabelSelector: OperatorPods})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d operator pods", len(live))
	}
	return &live[0], nil
}

// KillOperator kills the operator: SIGKILL to every steward process of
// its pod (the operator and the certificate renewal processes it started:
// nothing runs a handler, the leader Lease is not released), then the pod
// deleted with grace period 0 (which alone would be a SIGTERM with 2 s of
// grace: the kubelet's minimum, time enough to release the Lease). It
// waits for the Deployment's next pod to be Ready; that one acts once the
// killed one's Lease has expired. It returns the killed pod.
func KillOperator(tb testing.TB, cs *kubernetes.Clientset) *corev1.Pod {
	tb.Helper()
	var old *corev1.Pod
	harness.Eventually(tb, time.Minute, 500*time.Millisecond, "the operator's pod", func() (err error) {
		old, err = OperatorPod(tb, cs)
		return err
	})
	pids, err := PodProcesses(old.UID, "steward")
	if err != nil || len(pids) == 0 {
		tb.Fatalf("the steward processes of pod %s: %v (%d)", old.Name, err, len(pids))
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			tb.Fatalf("kill -9 %d (pod %s): %v", pid, old.Name, err)
		}
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(OperatorNS).Delete(tb.Context(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		tb.Fatal(err)
	}
	harness.Eventually(tb, 3*time.Minute, 500*time.Millisecond, "the operator's next pod Ready", func() error {
		p, err := OperatorPod(tb, cs)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("pod %s not deleted yet", p.Name)
		}
		if !PodReady(p) {
			return fmt.Errorf("pod %s %s, not Ready", p.Name, p.Status.Phase)
		}
		return nil
	})
	return old
}

// PodProcesses are the PIDs (as this machine sees them) of the processes
// of the pod uid whose command is name (any, for ""): those of its cgroup
// (v1, the kubelet's cgroupfs layout under the node's cgroup) and below.
func PodProcesses(uid types.UID, name string) ([]int, error) {
	var dirs []string
	for _, pat := range []string{"/sys/fs/cgroup/pids/*/kubepods/*/pod%s", "/sys/fs/cgroup/pids/*/kubepods/pod%s"} {
		m, _ := filepath.Glob(fmt.Sprintf(pat, uid))
		dirs = append(dirs, m...)
	}
	if len(dirs) != 1 {
		return nil, fmt.Errorf("%d cgroups of pod %s", len(dirs), uid)
	}
	var pids []int
	err := filepath.WalkDir(dirs[0], func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			if name == "" {
				pids = append(pids, pid)
			} else if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == name {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

// PodReady says whether p's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Logs writes a pod's logs into the test's.
func Logs(tb testing.TB, cs *kubernetes.Clientset, ns, pod string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	tb.Logf("--- logs of pod %s/%s (%v):\n%s", ns, pod, err, Tail(string(b), 150))
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Namespace makes the test's namespace, deleted when the test ends.
func Namespace(tb testing.TB, cs *kubernetes.Clientset, name string) string {
	tb.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(tb.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// S3Secret makes Secret "s3" in ns from the local Kubernetes' S3
// credentials file.
func S3Secret(tb testing.TB, c *localkube.Cluster, cs *kubernetes.Clientset, ns string) {
	tb.Helper()
	creds, err := os.ReadFile(c.S3CredentialsFile)
	if err != nil {
		tb.Fatal(err)
	}
	s3 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, StringData: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(string(creds)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		s3.StringData[k] = v
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(tb.Context(), s3, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// CreateClusters creates the EtcdClusters; when the test ends they are
// deleted, after their pods (phase, node, containers, logs) and status
// are written into the log of a test that failed.
func CreateClusters(tb testing.TB, cs *kubernetes.Clientset, cl client.Client, ecs ...*v1alpha1.EtcdCluster) {
	tb.Helper()
	for _, ec := range ecs {
		if err := cl.Create(tb.Context(), ec); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, ec := range ecs {
			if tb.Failed() {
				pods, _ := cs.CoreV1().Pods(ec.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
				for _, p := range pods.Items {
					tb.Logf("pod %s: %s on %s %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.ContainerStatuses)
					Logs(tb, cs, ec.Namespace, p.Name)
				}
				var got v1alpha1.EtcdCluster
				if err := cl.Get(context.Background(), client.ObjectKeyFromObject(ec), &got); err == nil {
					tb.Logf("%s status: %+v", ec.Name, got.Status)
				}
			}
			_ = cl.Delete(context.Background(), ec)
		}
	})
}

// ScaleCluster creates EtcdCluster db of n members in ns (no backups) and
// waits until it has n ready members.
func ScaleCluster(tb testing.TB, cs *kubernetes.Clientset, cl client.Client, ns string, n int32) *v1alpha1.EtcdCluster {
	tb.Helper()
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.EtcdClusterSpec{Replicas: n}}
	CreateClusters(tb, cs, cl, ec)
	WaitMembers(tb, cl, ec, int(n), 8*time.Minute)
	return ec
}

// WaitMembers waits until ec has n ready voting members, AllMembersReady,
// Scaled AsRequested, the status of its generation and a StatefulSet of n
// pods, and returns its status.
func WaitMembers(tb testing.TB, cl client.Client, ec *v1alpha1.EtcdCluster, n int, timeout time.Duration) v1alpha1.EtcdClusterStatus {
	tb.Helper()
	var got v1alpha1.EtcdCluster
	harness.Eventually(tb, timeout, time.Second, fmt.Sprintf("EtcdCluster %s with %d ready members", ec.Name, n), func() error {
		if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		st := got.Status
		if err := ConditionsTrue(st, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, operator.ConditionScaled); err != nil {
			return err
		}
		if len(st.Members) != n || int(st.ReadyReplicas) != n || int(st.Replicas) != n || st.ObservedGeneration != got.Generation {
			return fmt.Errorf("members %+v, replicas %d, ready %d", st.Members, st.Replicas, st.ReadyReplicas)
		}
		var ss appsv1.StatefulSet
		if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &ss); err != nil {
			return err
		}
		if int(*ss.Spec.Replicas) != n {
			return fmt.Errorf("StatefulSet replicas %d", *ss.Spec.Replicas)
		}
		return nil
	})
	return got.Status
}

// WaitHealthy waits until ec has n members, all ready, and Ready,
// AllMembersReady and BackupReady True, and extra (when not nil) returns
// nil for its status; it polls every 2 s and returns the status.
func WaitHealthy(tb testing.TB, cl client.Client, ec *v1alpha1.EtcdCluster, n int, what string, timeout time.Duration, extra func(st v1alpha1.EtcdClusterStatus) error) v1alpha1.EtcdClusterStatus {
	tb.Helper()
	var got v1alpha1.EtcdCluster
	harness.Eventually(tb, timeout, 2*time.Second, what, func() error {
		if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		st := got.Status
		if err := ConditionsTrue(st, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady); err != nil {
			return err
		}
		if len(st.Members) != n || int(st.ReadyReplicas) != n {
			return fmt.Errorf("members %+v, ready %d", st.Members, st.ReadyReplicas)
		}
		if extra != nil {
			return extra(st)
		}
		return nil
	})
	return got.Status
}

// WaitVersion waits until ec's n members are all on version v with
// AllMembersReady True, status.version v and UpgradeInProgress False (no
// plan left); it polls every 2 s, calls observe (when not nil) with every
// resource it reads, and returns the last.
func WaitVersion(tb testing.TB, cl client.Client, ec *v1alpha1.EtcdCluster, n int, v string, timeout time.Duration, observe func(*v1alpha1.EtcdCluster)) *v1alpha1.EtcdCluster {
	tb.Helper()
	var got v1alpha1.EtcdCluster
	harness.Eventually(tb, timeout, 2*time.Second, "every member ready on "+v, func() error {
		if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		if observe != nil {
			observe(&got)
		}
		st := got.Status
		if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAllMembersReady) {
			return fmt.Errorf("AllMembersReady not True: %+v (last operation %+v)", meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAllMembersReady), st.LastOperation)
		}
		if up := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionUpgradeInProgress); up == nil || up.Status != metav1.ConditionFalse {
			return fmt.Errorf("UpgradeInProgress %+v", up)
		}
		if st.Version != v || len(st.Members) != n {
			return fmt.Errorf("version %q, members %+v", st.Version, st.Members)
		}
		for _, m := range st.Members {
			if m.Version != v {
				return fmt.Errorf("member %s on %s", m.Name, m.Version)
			}
		}
		return nil
	})
	return &got
}

// WaitBackedUp waits until the backups under prefix in the local
// Kubernetes' S3 bucket (an EtcdCluster's spec.backup.s3.prefix) hold
// revision rev, read from the bucket as `steward backup list` does
// (manifests without the cluster's key trusted: the test has none),
// polling every second.
func WaitBackedUp(tb testing.TB, c *localkube.Cluster, prefix string, rev int64, timeout time.Duration) {
	tb.Helper()
	ctx := tb.Context()
	store, err := backup.NewS3Store(ctx, backup.S3Config{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: prefix, CredentialsFile: c.S3CredentialsFile})
	if err != nil {
		tb.Fatal(err)
	}
	harness.Eventually(tb, timeout, time.Second, fmt.Sprintf("the backups under %s to reach revision %d", prefix, rev), func() error {
		l, err := backup.List(ctx, store, backup.ListOptions{AllowUnauthenticated: true})
		if err != nil {
			return err
		}
		var end int64
		for _, m := range l.Backups {
			end = max(end, m.EndRevision)
		}
		if end < rev {
			return fmt.Errorf("%d backups, newest revision %d", len(l.Backups), end)
		}
		return nil
	})
}

// DeletePod deletes ec's member pod name (default grace period) and waits
// until its StatefulSet has made it again (a new pod of that name).
func DeletePod(tb testing.TB, cs *kubernetes.Clientset, ns, name string) {
	tb.Helper()
	pod, err := cs.CoreV1().Pods(ns).Get(tb.Context(), name, metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(tb.Context(), name, metav1.DeleteOptions{}); err != nil {
		tb.Fatal(err)
	}
	harness.Eventually(tb, 3*time.Minute, time.Second, "pod "+name+" recreated", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(tb.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == pod.UID {
			return fmt.Errorf("not deleted yet")
		}
		return nil
	})
}

// DeleteVolumesAndPods deletes the claims (data-NAME) and then the pods
// (grace period 0) of the member pods names, as when their machines and
// disks are lost, and waits until each pod is back with a new claim. A pod
// the StatefulSet made again before its old claim was gone waits for that
// claim forever: it is deleted again until it has a new one.
func DeleteVolumesAndPods(tb testing.TB, cs *kubernetes.Clientset, ns string, names ...string) {
	tb.Helper()
	oldClaims := map[string]types.UID{}
	for _, name := range names {
		claim := "data-" + name
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(tb.Context(), claim, metav1.GetOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		oldClaims[claim] = pvc.UID
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(tb.Context(), claim, metav1.DeleteOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	zero := int64(0)
	for _, name := range names {
		if err := cs.CoreV1().Pods(ns).Delete(tb.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			tb.Fatal(err)
		}
	}
	harness.Eventually(tb, 3*time.Minute, 2*time.Second, strings.Join(names, " and ")+" back with new volumes", func() error {
		for _, name := range names {
			claim := "data-" + name
			pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(tb.Context(), claim, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if err != nil || pvc.UID == oldClaims[claim] {
				p, perr := cs.CoreV1().Pods(ns).Get(tb.Context(), name, metav1.GetOptions{})
				if perr == nil && p.Status.Phase == corev1.PodPending && apierrors.IsNotFound(err) {
					_ = cs.CoreV1().Pods(ns).Delete(tb.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
				return fmt.Errorf("claim %s not new yet", claim)
			}
		}
		return nil
	})
}

// ConditionsTrue says which of the conditions is not True in st.
func ConditionsTrue(st v1alpha1.EtcdClusterStatus, types ...string) error {
	for _, typ := range types {
		if !meta.IsStatusConditionTrue(st.Conditions, typ) {
			return fmt.Errorf("%s not True: %+v (last operation %+v)", typ, meta.FindStatusCondition(st.Conditions, typ), st.LastOperation)
		}
	}
	return nil
}

// SetReplicas changes spec.replicas (with kubectl scale when kubectlScale).
func SetReplicas(tb testing.TB, c *localkube.Cluster, cl client.Client, ec *v1alpha1.EtcdCluster, n int32, kubectlScale bool) {
	tb.Helper()
	if kubectlScale {
		Kubectl(tb, c, "-n", ec.Namespace, "scale", "etcdcluster/"+ec.Name, "--replicas="+strconv.Itoa(int(n)))
		return
	}
	var got v1alpha1.EtcdCluster
	if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
		tb.Fatal(err)
	}
	got.Spec.Replicas = n
	if err := cl.Update(tb.Context(), &got); err != nil {
		tb.Fatal(err)
	}
}

// SetVersion changes spec.version.
func SetVersion(tb testing.TB, cl client.Client, ec *v1alpha1.EtcdCluster, v string) {
	tb.Helper()
	var got v1alpha1.EtcdCluster
	if err := cl.Get(tb.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
		tb.Fatal(err)
	}
	got.Spec.Version = v
	if err := cl.Update(tb.Context(), &got); err != nil {
		tb.Fatal(err)
	}
}

// MemberIDs are the members' IDs by name.
func MemberIDs(st v1alpha1.EtcdClusterStatus) map[string]string {
	ids := map[string]string{}
	for _, m := range st.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

// Events are the reasons of ec's Events, each with the newest message.
func Events(tb testing.TB, cs *kubernetes.Clientset, ns, name string) map[string]string {
	tb.Helper()
	evs, err := cs.CoreV1().Events(ns).List(tb.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		tb.Fatal(err)
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	reasons := map[string]string{}
	for _, e := range evs.Items {
		reasons[e.Reason] = e.Message
	}
	return reasons
}

// RequireEvents fails the test unless name has an Event of each reason,
// and returns them all (events).
func RequireEvents(tb testing.TB, cs *kubernetes.Clientset, ns, name string, want ...string) map[string]string {
	tb.Helper()
	reasons := Events(tb, cs, ns, name)
	for _, r := range want {
		if _, ok := reasons[r]; !ok {
			tb.Errorf("no event %s on %s: %v", r, name, slices.Sorted(maps.Keys(reasons)))
		}
	}
	return reasons
}

// clientSeq numbers ClientPod's pods; its mutex guards n (tests run in
// parallel).
var clientSeq struct {
	sync.Mutex
	n int
}

// ClientPod runs etcdctl ARGS in a pod of the Steward image against
// https://db-client.NS.svc:2379 with the Secret db-client-tls, and
// returns its output.
func ClientPod(tb testing.TB, cs *kubernetes.Clientset, ns, image string, args ...string) string {
	tb.Helper()
	clientSeq.Lock()
	clientSeq.n++
	name := fmt.Sprintf("client-%d", clientSeq.n)
	clientSeq.Unlock()
	pod := EtcdctlPod(name, ns, image, append([]string{"--command-timeout=20s"}, args...))
	if _, err := cs.CoreV1().Pods(ns).Create(tb.Context(), pod, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	var phase corev1.PodPhase
	harness.Eventually(tb, 2*time.Minute, 500*time.Millisecond, "client pod "+name+" done", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(tb.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = p.Status.Phase
		if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		tb.Fatalf("etcdctl %s through db-client: %s\n%s", strings.Join(args, " "), phase, bytes.TrimSpace(b))
	}
	return string(b)
}

// EtcdctlPod is a pod NAME running the image's etcdctl once with args
// against db-client in ns, with db-client-tls as its client certificate.
func EtcdctlPod(name, ns, image string, args []string) *corev1.Pod {
	grace := int64(1)
	argv := append([]string{"--endpoints=https://db-client." + ns + ".svc:2379",
		"--cacert=/tls/ca.crt", "--cert=/tls/tls.crt", "--key=/tls/tls.key"}, args...)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "etcdctl", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/usr/local/bin/etcdctl"}, Args: argv,
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-client-tls"}}}},
		},
	}
}

// ServiceClient is ServiceClients' first client.
func ServiceClient(tb testing.TB, c *localkube.Cluster, cs *kubernetes.Clientset, ec *v1alpha1.EtcdCluster) *clientv3.Client {
	tb.Helper()
	return ServiceClients(tb, c, cs, ec, 1)[0]
}

// ServiceClients returns n clientv3 clients of the cluster through its
// client Service NAME-client, as an application in the cluster connects:
// the test's own process is on the nodes' bridge, outside the pod and
// Service networks, so each connection is opened inside a node's network
// namespace (client I starts at node I, and each new connection goes
// through the next node) to the Service's ClusterIP, which kube-proxy
// balances over the ready member pods. TLS: the Secret NAME-client-tls,
// verified against the Service's name. It returns once a write through the
// first one succeeded.
func ServiceClients(tb testing.TB, c *localkube.Cluster, cs *kubernetes.Clientset, ec *v1alpha1.EtcdCluster, n int) []*clientv3.Client {
	tb.Helper()
	ctx := tb.Context()
	svc, err := cs.CoreV1().Services(ec.Namespace).Get(ctx, ec.Name+"-client", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	target := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(operator.ClientPort))
	sec, err := cs.CoreV1().Secrets(ec.Namespace).Get(ctx, ec.Name+"-client-tls", metav1.GetOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.Data["ca.crt"])
	name := ec.Name + "-client." + ec.Namespace + ".svc"
	tlsConfig := func() *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}
	}
	var dials []func(ctx context.Context, _ string) (net.Conn, error)
	var out []*clientv3.Client
	for i := range n {
		var next atomic.Uint32
		next.Store(uint32(i))
		dial := func(ctx context.Context, _ string) (net.Conn, error) {
			node := c.Nodes[int(next.Add(1)-1)%len(c.Nodes)]
			return DialInNetns(ctx, filepath.Join("/run/netns", node.Netns), target)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{name + ":2379"}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: tlsConfig(), DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = cli.Close() })
		dials = append(dials, dial)
		out = append(out, cli)
	}
	harness.Eventually(tb, time.Minute, time.Second, "a write through "+svc.Name, func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := out[0].Put(wctx, "/e2e/through-service", "ok")
		if err != nil {
			// Say why: the connection or the handshake.
			conn, derr := dials[0](wctx, "")
			if derr != nil {
				return fmt.Errorf("%w; dial %s from a node: %v", err, target, derr)
			}
			defer conn.Close()
			cfg := tlsConfig()
			cfg.NextProtos = []string{"h2"}
			if herr := tls.Client(conn, cfg).HandshakeContext(wctx); herr != nil {
				return fmt.Errorf("%w; TLS handshake with %s: %v", err, target, herr)
			}
		}
		return err
	})
	return out
}

// DialInNetns opens a TCP connection from the network namespace netns: on
// a thread of its own that enters netns and is never given back to other
// goroutines (it ends with the goroutine, locked), so no other code runs
// in that namespace. The socket stays in it.
func DialInNetns(ctx context.Context, netns, addr string) (net.Conn, error) {
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

// Load is a writer (retrying each write up to three times) and the
// linearizability checker's clients, through NAME-client.
type Load struct {
	Cli *clientv3.Client
	W   *workload.Writer
	Lin *workload.LinChecker
}

// StartLoad starts a writer on cli under PREFIX/w and the linearizability
// checker's clients (those of lin, else two on cli) under PREFIX/lin.
func StartLoad(tb testing.TB, prefix string, cli *clientv3.Client, lin ...clientv3.KV) *Load {
	tb.Helper()
	if len(lin) == 0 {
		lin = []clientv3.KV{cli, cli}
	}
	return &Load{Cli: cli,
		W:   workload.Start(tb, cli, workload.Options{Prefix: prefix + "/w", Interval: 20 * time.Millisecond, Attempts: 3, RetryDelay: 200 * time.Millisecond}),
		Lin: workload.StartLinearizable(tb, lin, workload.LinOptions{Prefix: prefix + "/lin", Interval: 50 * time.Millisecond})}
}

// GoesOn waits until the writer has 20 more acknowledged writes.
func (l *Load) GoesOn(tb testing.TB, what string) {
	tb.Helper()
	harness.Eventually(tb, 2*time.Minute, time.Second, "writes "+what, l.W.AckedAbove(l.W.Acked()+20))
}

// Stop stops both and requires every acknowledged write present and the
// history linearizable; it returns the writer's record.
func (l *Load) Stop(tb testing.TB, what string) *workload.Result {
	tb.Helper()
	res := l.W.Stop()
	workload.RequireLinearizable(tb, what, l.Lin.Stop())
	workload.RequireKeys(tb, l.Cli, res)
	tb.Logf("writer: %s", res)
	return res
}

// Usage is what the operator's pod has used, read from its cgroup (v1,
// the kubelet's cgroupfs layout under the node's cgroup): CPU time and
// memory of every process of the pod (the operator and the certificate
// renewal processes it starts).
type Usage struct {
	At  time.Time
	Pod string
	CPU time.Duration // cpuacct.usage
	RSS int64         // memory.stat total_rss
	WS  int64         // the working set: memory.usage_in_bytes less total_inactive_file
}

// OperatorUsage reads the operator's pod's usage.
func OperatorUsage(tb testing.TB, cs *kubernetes.Clientset) (Usage, error) {
	p, err := OperatorPod(tb, cs)
	if err != nil {
		return Usage{}, err
	}
	find := func(ctrl, file string) (string, error) {
		for _, pat := range []string{"/sys/fs/cgroup/%s/*/kubepods/*/pod%s/%s", "/sys/fs/cgroup/%s/*/kubepods/pod%s/%s"} {
			if m, _ := filepath.Glob(fmt.Sprintf(pat, ctrl, p.UID, file)); len(m) == 1 {
				return m[0], nil
			}
		}
		return "", fmt.Errorf("no %s cgroup of pod %s (%s)", ctrl, p.Name, p.UID)
	}
	u := Usage{At: time.Now(), Pod: p.Name}
	f, err := find("cpuacct", "cpuacct.usage")
	if err != nil {
		return u, err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return u, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return u, err
	}
	u.CPU = time.Duration(ns)
	if f, err = find("memory", "memory.stat"); err != nil {
		return u, err
	}
	if b, err = os.ReadFile(f); err != nil {
		return u, err
	}
	var inactive int64
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "total_rss":
			u.RSS = n
		case "total_inactive_file":
			inactive = n
		}
	}
	if b, err = os.ReadFile(filepath.Join(filepath.Dir(f), "memory.usage_in_bytes")); err != nil {
		return u, err
	}
	total, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return u, err
	}
	u.WS = total - inactive
	return u, nil
}

// UsageWatch samples OperatorUsage every second until the test ends.
type UsageWatch struct {
	mu      sync.Mutex // owns samples
	samples []Usage
}

// WatchUsage starts sampling the operator pod's usage every second, until
// the test or benchmark ends.
func WatchUsage(tb testing.TB, cs *kubernetes.Clientset) *UsageWatch {
	w := &UsageWatch{}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if u, err := OperatorUsage(tb, cs); err == nil {
				w.mu.Lock()
				w.samples = append(w.samples, u)
				w.mu.Unlock()
			}
			select {
			case <-tb.Context().Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// UsageFigures are what the operator used in a window (UsageWatch.Window).
type UsageFigures struct {
	Cores   float64       // CPU on average, in cores
	CPU     time.Duration // CPU time used
	Span    time.Duration // from the first sample used to the last
	PeakRSS int64         // bytes
	PeakWS  int64         // bytes, the working set
	Samples int
}

// Window says what the operator used from start to end: its CPU (over the
// samples of its newest pod in the window) and its peak resident and
// working set memory; ok is false with fewer than two samples of that pod.
func (w *UsageWatch) Window(start, end time.Time) (f UsageFigures, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first, last *Usage
	for i := range w.samples {
		u := &w.samples[i]
		if u.At.Before(start) || u.At.After(end) {
			continue
		}
		if first == nil || u.Pod != first.Pod {
			first = u
		}
		last = u
		f.PeakRSS, f.PeakWS = max(f.PeakRSS, u.RSS), max(f.PeakWS, u.WS)
		f.Samples++
	}
	if first == nil || last == first {
		return f, false
	}
	f.CPU, f.Span = last.CPU-first.CPU, last.At.Sub(first.At)
	f.Cores = float64(f.CPU) / float64(f.Span)
	return f, true
}

// Between is Window as a line of text.
func (w *UsageWatch) Between(start, end time.Time) string {
	f, ok := w.Window(start, end)
	if !ok {
		return "no samples"
	}
	return fmt.Sprintf("CPU %.3f cores (%s over %s), peak RSS %.1f MiB, peak working set %.1f MiB (%d samples)",
		f.Cores, f.CPU.Round(time.Millisecond), f.Span.Round(time.Second), float64(f.PeakRSS)/(1<<20), float64(f.PeakWS)/(1<<20), f.Samples)
}
