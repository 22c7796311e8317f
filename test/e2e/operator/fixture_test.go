package operator_test

// The package's fixtures, in one place: the Steward images, the operator's
// installation (and killing its pod), namespaces and EtcdClusters that
// clean up after themselves, clients through NAME-client (pods running
// etcdctl, and clientv3 from the nodes' network namespaces), the writer and
// the linearizability checker, Events, and the operator's resource use.

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
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// The Steward images the tests build from this checkout, laid out as `make
// images` lays out Steward's image: imageRef has the static steward and
// the store's etcdctl; upgradeImageRef also every etcd version of the
// binary store at /opt/steward/binaries (the version swaps take their
// binaries from there).
const (
	imageRef        = kubeimages.StewardImage + ":e2e-operator"
	upgradeImageRef = kubeimages.StewardImage + ":e2e-operator-upgrade"
)

var (
	imageMu   sync.Mutex
	imageDone = map[string]error{} // cluster dir + image -> build and import result
)

// stewardImage builds imageRef once per cluster and imports it into every
// node.
func stewardImage(t *testing.T, c *localkube.Cluster) string { return image(t, c, imageRef) }

// upgradeImage builds upgradeImageRef once per cluster and imports it
// into every node.
func upgradeImage(t *testing.T, c *localkube.Cluster) string { return image(t, c, upgradeImageRef) }

func image(t *testing.T, c *localkube.Cluster, ref string) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	key := c.Dir + "#" + ref
	err, done := imageDone[key]
	if !done {
		err = buildImage(t, c, ref, ref == upgradeImageRef)
		imageDone[key] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// buildImage writes the image ref (with the store's etcd versions when
// withStore) and imports it into every node.
func buildImage(t *testing.T, c *localkube.Cluster, ref string, withStore bool) error {
	name, tag, _ := strings.Cut(ref, ":")
	dir := filepath.Join(c.Dir, "e2e-image-"+tag)
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

// setup is the start of every test of the package: three nodes (else
// skipped), the image, the clients, the test's namespace ns, and the
// operator installed with that image for the test alone (removed when it
// ends): a test that kills the operator, drains nodes or reads the
// operator's metrics as its own runs with it, one at a time.
func setup(t *testing.T, c *localkube.Cluster, ns, image string) (*kubernetes.Clientset, client.Client) {
	t.Helper()
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	cs, cl := clients(t, c)
	namespace(t, cs, ns)
	installOperator(t, c, cs, image)
	return cs, cl
}

// setupShared is setup for a test that runs beside others (t.Parallel):
// one installation of the operator serves every such test running at
// once, made by the first and removed when the last ends. Go starts the
// parallel tests after every sequential one has ended, so the sequential
// tests' installations (setup) never meet a shared one. The test must
// leave the operator alone (no kill, no drain, no metric read as the
// operator's total) and work only in its namespace ns.
func setupShared(t *testing.T, c *localkube.Cluster, ns, image string) (*kubernetes.Clientset, client.Client) {
	t.Helper()
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	cs, cl := clients(t, c)
	namespace(t, cs, ns)
	sharedOperator.Lock()
	defer sharedOperator.Unlock()
	switch {
	case sharedOperator.users == 0:
		sharedOperator.image, sharedOperator.remove = applyOperator(t, c, image)
	case sharedOperator.image != image:
		t.Fatalf("the shared operator runs %s, this test wants %s: tests that share it use one image", sharedOperator.image, image)
	}
	sharedOperator.users++
	t.Cleanup(func() {
		if t.Failed() {
			pods, _ := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: operatorPods})
			for _, p := range pods.Items {
				logs(t, cs, operatorNS, p.Name)
			}
		}
		sharedOperator.Lock()
		defer sharedOperator.Unlock()
		if sharedOperator.users--; sharedOperator.users == 0 {
			sharedOperator.remove(t)
		}
	})
	return cs, cl
}

// sharedOperator is the installation setupShared's tests share; its mutex
// guards the fields (the tests run in parallel).
var sharedOperator struct {
	sync.Mutex
	users  int                 // tests using it
	image  string              // its image
	remove func(tb testing.TB) // deletes it (set with users going 0 -> 1)
}

// clients returns a clientset and a controller-runtime client (with the
// EtcdCluster type) of the admin's kubeconfig.
func clients(t *testing.T, c *localkube.Cluster) (*kubernetes.Clientset, client.Client) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cs, cl
}

func kubectl(t *testing.T, c *localkube.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(t.Context(), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// operatorNS is the operator's namespace in deploy/operator, and
// operatorPods the selector of its pods.
const (
	operatorNS   = "steward-system"
	operatorPods = "app.kubernetes.io/name=steward-operator"
)

// installOperator installs the operator as a user does, `kubectl apply -k
// deploy/operator` (the namespace steward-system, the CRD, the generated
// ClusterRole and its binding, the state volume, the Deployment), with the
// tests' image in place of the base's, and removes it when the test ends.
func installOperator(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, image string) {
	t.Helper()
	_, remove := applyOperator(t, c, image)
	t.Cleanup(func() {
		if t.Failed() {
			pods, _ := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: operatorPods})
			for _, p := range pods.Items {
				logs(t, cs, operatorNS, p.Name)
			}
		}
		remove(t)
	})
}

// applyOperator applies deploy/operator with image and waits for the CRD
// and the Deployment; it returns the image and what removes it all.
func applyOperator(t *testing.T, c *localkube.Cluster, image string) (string, func(tb testing.TB)) {
	t.Helper()
	base := filepath.Join(harness.RepoRoot(t), "deploy", "operator")
	out := kubectl(t, c, "kustomize", base)
	const baseImage = kubeimages.StewardImage + ":latest"
	if !strings.Contains(out, "image: "+baseImage) {
		t.Fatalf("kustomize %s names no image %s:\n%s", base, baseImage, out)
	}
	// Not the test's TempDir: a shared installation outlives the test
	// that made it; removed with it.
	dir, err := os.MkdirTemp("", "steward-operator-")
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "operator.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(out, baseImage, image)), 0o600); err != nil {
		t.Fatal(err)
	}
	remove := func(tb testing.TB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Kubectl(ctx, "delete", "--ignore-not-found", "-f", manifest).Run()
		_ = os.RemoveAll(dir)
	}
	// What was applied is removed if the test fails here (t.Fatal ends
	// the goroutine, running the deferred call): no caller holds remove.
	applied := false
	defer func() {
		if !applied {
			remove(t)
		}
	}()
	kubectl(t, c, "apply", "-f", manifest)
	kubectl(t, c, "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.steward.etcd.io")
	kubectl(t, c, "-n", operatorNS, "rollout", "status", "deployment/steward-operator", "--timeout=3m")
	applied = true
	return image, remove
}

// operatorPod is the operator's one pod that is not being deleted.
func operatorPod(t *testing.T, cs *kubernetes.Clientset) (*corev1.Pod, error) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(operatorNS).List(t.Context(), metav1.ListOptions{LabelSelector: operatorPods})
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

// killOperator kills the operator: SIGKILL to every steward process of
// its pod (the operator and the certificate renewal processes it started:
// nothing runs a handler, the leader Lease is not released), then the pod
// deleted with grace period 0 (which alone would be a SIGTERM with 2 s of
// grace: the kubelet's minimum, time enough to release the Lease). It
// waits for the Deployment's next pod to be Ready; that one acts once the
// killed one's Lease has expired. It returns the killed pod.
func killOperator(t *testing.T, cs *kubernetes.Clientset) *corev1.Pod {
	t.Helper()
	var old *corev1.Pod
	harness.Eventually(t, time.Minute, 500*time.Millisecond, "the operator's pod", func() (err error) {
		old, err = operatorPod(t, cs)
		return err
	})
	pids, err := podProcesses(old.UID, "steward")
	if err != nil || len(pids) == 0 {
		t.Fatalf("the steward processes of pod %s: %v (%d)", old.Name, err, len(pids))
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			t.Fatalf("kill -9 %d (pod %s): %v", pid, old.Name, err)
		}
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(operatorNS).Delete(t.Context(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 3*time.Minute, 500*time.Millisecond, "the operator's next pod Ready", func() error {
		p, err := operatorPod(t, cs)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("pod %s not deleted yet", p.Name)
		}
		if !podReady(p) {
			return fmt.Errorf("pod %s %s, not Ready", p.Name, p.Status.Phase)
		}
		return nil
	})
	return old
}

// podProcesses are the PIDs (as this machine sees them) of the processes
// of the pod uid whose command is name (any, for ""): those of its cgroup
// (v1, the kubelet's cgroupfs layout under the node's cgroup) and below.
func podProcesses(uid types.UID, name string) ([]int, error) {
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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// logs writes a pod's logs into the test's.
func logs(t *testing.T, cs *kubernetes.Clientset, ns, pod string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	t.Logf("--- logs of pod %s/%s (%v):\n%s", ns, pod, err, tail(string(b), 150))
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// namespace makes the test's namespace, deleted when the test ends.
func namespace(t *testing.T, cs *kubernetes.Clientset, name string) string {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// s3Secret makes Secret "s3" in ns from the local Kubernetes' S3
// credentials file.
func s3Secret(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	creds, err := os.ReadFile(c.S3CredentialsFile)
	if err != nil {
		t.Fatal(err)
	}
	s3 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, StringData: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(string(creds)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		s3.StringData[k] = v
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(t.Context(), s3, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createClusters creates the EtcdClusters; when the test ends they are
// deleted, after their pods (phase, node, containers, logs) and status
// are written into the log of a test that failed.
func createClusters(t *testing.T, cs *kubernetes.Clientset, cl client.Client, ecs ...*v1alpha1.EtcdCluster) {
	t.Helper()
	for _, ec := range ecs {
		if err := cl.Create(t.Context(), ec); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, ec := range ecs {
			if t.Failed() {
				pods, _ := cs.CoreV1().Pods(ec.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: operator.Selector(ec)})
				for _, p := range pods.Items {
					t.Logf("pod %s: %s on %s %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.ContainerStatuses)
					logs(t, cs, ec.Namespace, p.Name)
				}
				var got v1alpha1.EtcdCluster
				if err := cl.Get(context.Background(), client.ObjectKeyFromObject(ec), &got); err == nil {
					t.Logf("%s status: %+v", ec.Name, got.Status)
				}
			}
			_ = cl.Delete(context.Background(), ec)
		}
	})
}

// scaleCluster creates EtcdCluster db of n members in ns (no backups) and
// waits until it has n ready members.
func scaleCluster(t *testing.T, cs *kubernetes.Clientset, cl client.Client, ns string, n int32) *v1alpha1.EtcdCluster {
	t.Helper()
	ec := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.EtcdClusterSpec{Replicas: n}}
	createClusters(t, cs, cl, ec)
	waitMembers(t, cl, ec, int(n), 8*time.Minute)
	return ec
}

// waitMembers waits until ec has n ready voting members, AllMembersReady,
// Scaled AsRequested, the status of its generation and a StatefulSet of n
// pods, and returns its status.
func waitMembers(t *testing.T, cl client.Client, ec *v1alpha1.EtcdCluster, n int, timeout time.Duration) v1alpha1.EtcdClusterStatus {
	t.Helper()
	var got v1alpha1.EtcdCluster
	harness.Eventually(t, timeout, time.Second, fmt.Sprintf("EtcdCluster %s with %d ready members", ec.Name, n), func() error {
		if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
			return err
		}
		st := got.Status
		if err := conditionsTrue(st, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, operator.ConditionScaled); err != nil {
			return err
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

// conditionsTrue says which of the conditions is not True in st.
func conditionsTrue(st v1alpha1.EtcdClusterStatus, types ...string) error {
	for _, typ := range types {
		if !meta.IsStatusConditionTrue(st.Conditions, typ) {
			return fmt.Errorf("%s not True: %+v (last operation %+v)", typ, meta.FindStatusCondition(st.Conditions, typ), st.LastOperation)
		}
	}
	return nil
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

// setVersion changes spec.version.
func setVersion(t *testing.T, cl client.Client, ec *v1alpha1.EtcdCluster, v string) {
	t.Helper()
	var got v1alpha1.EtcdCluster
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(ec), &got); err != nil {
		t.Fatal(err)
	}
	got.Spec.Version = v
	if err := cl.Update(t.Context(), &got); err != nil {
		t.Fatal(err)
	}
}

func memberIDs(st v1alpha1.EtcdClusterStatus) map[string]string {
	ids := map[string]string{}
	for _, m := range st.Members {
		ids[m.Name] = m.ID
	}
	return ids
}

// events are the reasons of ec's Events, each with the newest message.
func events(t *testing.T, cs *kubernetes.Clientset, ns, name string) map[string]string {
	t.Helper()
	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	reasons := map[string]string{}
	for _, e := range evs.Items {
		reasons[e.Reason] = e.Message
	}
	return reasons
}

// requireEvents fails the test unless name has an Event of each reason,
// and returns them all (events).
func requireEvents(t *testing.T, cs *kubernetes.Clientset, ns, name string, want ...string) map[string]string {
	t.Helper()
	reasons := events(t, cs, ns, name)
	for _, r := range want {
		if _, ok := reasons[r]; !ok {
			t.Errorf("no event %s on %s: %v", r, name, slices.Sorted(maps.Keys(reasons)))
		}
	}
	return reasons
}

var clientSeq struct {
	sync.Mutex
	n int
}

// clientPod runs etcdctl ARGS in a pod of the Steward image against
// https://db-client.NS.svc:2379 with the Secret db-client-tls, and
// returns its output.
func clientPod(t *testing.T, cs *kubernetes.Clientset, ns, image string, args ...string) string {
	t.Helper()
	clientSeq.Lock()
	clientSeq.n++
	name := fmt.Sprintf("client-%d", clientSeq.n)
	clientSeq.Unlock()
	pod := etcdctlPod(name, ns, image, append([]string{"--command-timeout=20s"}, args...))
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	harness.Eventually(t, 2*time.Minute, 500*time.Millisecond, "client pod "+name+" done", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = p.Status.Phase
		if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	b, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("etcdctl %s through db-client: %s\n%s", strings.Join(args, " "), phase, bytes.TrimSpace(b))
	}
	return string(b)
}

// etcdctlPod is a pod NAME running the image's etcdctl once with args
// against db-client in ns, with db-client-tls as its client certificate.
func etcdctlPod(name, ns, image string, args []string) *corev1.Pod {
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

// serviceClient is serviceClients' first client.
func serviceClient(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ec *v1alpha1.EtcdCluster) *clientv3.Client {
	t.Helper()
	return serviceClients(t, c, cs, ec, 1)[0]
}

// serviceClients returns n clientv3 clients of the cluster through its
// client Service NAME-client, as an application in the cluster connects:
// the test's own process is on the nodes' bridge, outside the pod and
// Service networks, so each connection is opened inside a node's network
// namespace (client I starts at node I, and each new connection goes
// through the next node) to the Service's ClusterIP, which kube-proxy
// balances over the ready member pods. TLS: the Secret NAME-client-tls,
// verified against the Service's name. It returns once a write through the
// first one succeeded.
func serviceClients(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, ec *v1alpha1.EtcdCluster, n int) []*clientv3.Client {
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
			return dialInNetns(ctx, filepath.Join("/run/netns", node.Netns), target)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{name + ":2379"}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: tlsConfig(), DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		dials = append(dials, dial)
		out = append(out, cli)
	}
	harness.Eventually(t, time.Minute, time.Second, "a write through "+svc.Name, func() error {
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

// load is a writer (retrying each write up to three times) and the
// linearizability checker's clients, through NAME-client.
type load struct {
	cli *clientv3.Client
	w   *workload.Writer
	lin *workload.LinChecker
}

// startLoad starts a writer on cli under PREFIX/w and the linearizability
// checker's clients (those of lin, else two on cli) under PREFIX/lin.
func startLoad(t *testing.T, prefix string, cli *clientv3.Client, lin ...clientv3.KV) *load {
	t.Helper()
	if len(lin) == 0 {
		lin = []clientv3.KV{cli, cli}
	}
	return &load{cli: cli,
		w:   workload.Start(t, cli, workload.Options{Prefix: prefix + "/w", Interval: 20 * time.Millisecond, Attempts: 3, RetryDelay: 200 * time.Millisecond}),
		lin: workload.StartLinearizable(t, lin, workload.LinOptions{Prefix: prefix + "/lin", Interval: 50 * time.Millisecond})}
}

// goesOn waits until the writer has 20 more acknowledged writes.
func (l *load) goesOn(t *testing.T, what string) {
	t.Helper()
	harness.Eventually(t, 2*time.Minute, time.Second, "writes "+what, l.w.AckedAbove(l.w.Acked()+20))
}

// stop stops both and requires every acknowledged write present and the
// history linearizable; it returns the writer's record.
func (l *load) stop(t *testing.T, what string) *workload.Result {
	t.Helper()
	res := l.w.Stop()
	workload.RequireLinearizable(t, what, l.lin.Stop())
	workload.RequireKeys(t, l.cli, res)
	t.Logf("writer: %s", res)
	return res
}

// usage is what the operator's pod has used, read from its cgroup (v1,
// the kubelet's cgroupfs layout under the node's cgroup): CPU time and
// memory of every process of the pod (the operator and the certificate
// renewal processes it starts).
type usage struct {
	at  time.Time
	pod string
	cpu time.Duration // cpuacct.usage
	rss int64         // memory.stat total_rss
	ws  int64         // the working set: memory.usage_in_bytes less total_inactive_file
}

// operatorUsage reads the operator's pod's usage.
func operatorUsage(t *testing.T, cs *kubernetes.Clientset) (usage, error) {
	p, err := operatorPod(t, cs)
	if err != nil {
		return usage{}, err
	}
	find := func(ctrl, file string) (string, error) {
		for _, pat := range []string{"/sys/fs/cgroup/%s/*/kubepods/*/pod%s/%s", "/sys/fs/cgroup/%s/*/kubepods/pod%s/%s"} {
			if m, _ := filepath.Glob(fmt.Sprintf(pat, ctrl, p.UID, file)); len(m) == 1 {
				return m[0], nil
			}
		}
		return "", fmt.Errorf("no %s cgroup of pod %s (%s)", ctrl, p.Name, p.UID)
	}
	u := usage{at: time.Now(), pod: p.Name}
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
	u.cpu = time.Duration(ns)
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
			u.rss = n
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
	u.ws = total - inactive
	return u, nil
}

// usageWatch samples operatorUsage every second until the test ends.
type usageWatch struct {
	mu      sync.Mutex // owns samples
	samples []usage
}

func watchUsage(t *testing.T, cs *kubernetes.Clientset) *usageWatch {
	w := &usageWatch{}
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if u, err := operatorUsage(t, cs); err == nil {
				w.mu.Lock()
				w.samples = append(w.samples, u)
				w.mu.Unlock()
			}
			select {
			case <-t.Context().Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// between says what the operator used from start to end: its CPU (cores
// on average, over the samples of its newest pod in the window) and its
// peak resident and working set memory.
func (w *usageWatch) between(start, end time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first, last *usage
	var rss, ws int64
	n := 0
	for i := range w.samples {
		u := &w.samples[i]
		if u.at.Before(start) || u.at.After(end) {
			continue
		}
		if first == nil || u.pod != first.pod {
			first = u
		}
		last = u
		rss, ws = max(rss, u.rss), max(ws, u.ws)
		n++
	}
	if first == nil || last == first {
		return "no samples"
	}
	cores := float64(last.cpu-first.cpu) / float64(last.at.Sub(first.at))
	return fmt.Sprintf("CPU %.3f cores (%s over %s), peak RSS %.1f MiB, peak working set %.1f MiB (%d samples)",
		cores, (last.cpu - first.cpu).Round(time.Millisecond), last.at.Sub(first.at).Round(time.Second), float64(rss)/(1<<20), float64(ws)/(1<<20), n)
}
