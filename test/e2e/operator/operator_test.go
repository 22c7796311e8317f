package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
)

// imageRef is the Steward image the tests build: this checkout's steward
// (static) and the store's etcdctl, laid out as `make images` lays out
// Steward's image.
const imageRef = kubeimages.StewardImage + ":e2e-operator"

var (
	imageMu   sync.Mutex
	imageDone = map[string]error{} // cluster dir -> build and import result
)

// stewardImage builds the image once per cluster and imports it into every
// node.
func stewardImage(t *testing.T, c *localkube.Cluster) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	err, done := imageDone[c.Dir]
	if !done {
		err = buildImage(t, c)
		imageDone[c.Dir] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return imageRef
}

func buildImage(t *testing.T, c *localkube.Cluster) error {
	dir := filepath.Join(c.Dir, "e2e-operator-image")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bin := filepath.Join(dir, "steward")
	if err := kubeimages.GoBuild(context.Background(), harness.RepoRoot(t), "./cmd/steward", bin); err != nil {
		return err
	}
	store := os.Getenv("STEWARD_TEST_STORE")
	if store == "" {
		store = filepath.Join(harness.RepoRoot(t), ".cache", "store")
	}
	etcdctls, _ := filepath.Glob(filepath.Join(store, "etcd-v3.6.*", "etcdctl"))
	if len(etcdctls) == 0 {
		return fmt.Errorf("no etcdctl of 3.6 in the store %s (STEWARD_TEST_STORE)", store)
	}
	name, tag, _ := strings.Cut(imageRef, ":")
	tarball := filepath.Join(dir, "steward.tar")
	if _, err := ociimage.Write(context.Background(), ociimage.Spec{Name: name, Tag: tag,
		Files: []ociimage.File{
			{Path: "/usr/local/bin/steward", Mode: 0o755, Source: bin},
			{Path: "/usr/local/bin/etcdctl", Mode: 0o755, Source: etcdctls[len(etcdctls)-1]},
			{Path: operator.PodStewardDir, Mode: fs.ModeDir | 0o700},
			{Path: operator.PodBinaryStore, Mode: fs.ModeDir | 0o755},
			{Path: "/var/lib/steward-operator", Mode: fs.ModeDir | 0o700},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		},
		Entrypoint: []string{"/usr/local/bin/steward"}}, tarball); err != nil {
		return err
	}
	return c.ImportImage(context.Background(), tarball)
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

// installOperator installs the operator as a user does, `kubectl apply -k
// deploy/operator` (the namespace steward-system, the CRD, the generated
// ClusterRole and its binding, the state volume, the Deployment), with the
// tests' image in place of the base's, and removes it when the test ends.
func installOperator(t *testing.T, c *localkube.Cluster, cs *kubernetes.Clientset, image string) {
	t.Helper()
	base := filepath.Join(harness.RepoRoot(t), "deploy", "operator")
	out := kubectl(t, c, "kustomize", base)
	const baseImage = kubeimages.StewardImage + ":latest"
	if !strings.Contains(out, "image: "+baseImage) {
		t.Fatalf("kustomize %s names no image %s:\n%s", base, baseImage, out)
	}
	manifest := filepath.Join(t.TempDir(), "operator.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(out, baseImage, image)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, c, "apply", "-f", manifest)
	t.Cleanup(func() {
		if t.Failed() {
			pods, _ := cs.CoreV1().Pods(operatorNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=steward-operator"})
			for _, p := range pods.Items {
				logs(t, cs, operatorNS, p.Name)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Kubectl(ctx, "delete", "--ignore-not-found", "-f", manifest).Run()
	})
	kubectl(t, c, "wait", "--for=condition=Established", "--timeout=60s", "crd/etcdclusters.steward.etcd.io")
	kubectl(t, c, "-n", operatorNS, "rollout", "status", "deployment/steward-operator", "--timeout=3m")
}

// operatorNS is the operator's namespace in deploy/operator.
const operatorNS = "steward-system"

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

// TestOperatorCreate: the operator, a pod of the cluster, makes a
// 3-member EtcdCluster with continuous backups to the cluster's S3 server,
// spread over the three zones; it becomes Ready with AllMembersReady and
// three members with IDs and roles, and BackupReady with a last backup
// time; a client pod writes and reads through NAME-client with
// NAME-client-tls; deleting the EtcdCluster removes its pods and keeps
// their claims.
func TestOperatorCreate(t *testing.T) { harness.ForEachLocalKube(t, operatorCreate) }

func operatorCreate(t *testing.T, c *localkube.Cluster) {
	if len(c.Nodes) < 3 {
		t.Skip("needs three nodes")
	}
	image := stewardImage(t, c)
	cs, cl := clients(t, c)
	ns := namespace(t, cs, "op-create")
	installOperator(t, c, cs, image)

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
	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3, Backup: &v1alpha1.Backup{
			S3: &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, CredentialsSecret: "s3"},
		}},
	}
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
	})
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	var got v1alpha1.EtcdCluster
	harness.Eventually(t, 8*time.Minute, 2*time.Second, "EtcdCluster db Ready with AllMembersReady and 3 members", func() error {
		if err := cl.Get(t.Context(), key, &got); err != nil {
			return err
		}
		st := got.Status
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionDataVolumesReady, v1alpha1.ConditionBackupReady} {
			if !meta.IsStatusConditionTrue(st.Conditions, typ) {
				cond := meta.FindStatusCondition(st.Conditions, typ)
				return fmt.Errorf("%s not True: %+v (last operation %+v)", typ, cond, st.LastOperation)
			}
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
		if len(m.ID) != 16 || !m.Ready || m.Version == "" || (m.Role != "Leader" && m.Role != "Member") {
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

	// A Lease per member, for its agent to renew.
	for i := range 3 {
		l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), fmt.Sprintf("db-%d", i), metav1.GetOptions{})
		if err != nil || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Name != "db" {
			t.Errorf("lease db-%d: %v", i, err)
		}
	}

	// A client writes and reads through the client Service.
	clientPod(t, cs, ns, image, "put", "/operator/e2e", "hello")
	if out := clientPod(t, cs, ns, image, "get", "/operator/e2e", "--print-value-only"); strings.TrimSpace(out) != "hello" {
		t.Errorf("read through db-client: %q", out)
	}

	// An Event for the actions.
	evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=db"})
	if err == nil {
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			reasons[e.Reason] = true
		}
		for _, r := range []string{"Initialized", "Started", "BackupsOn"} {
			if !reasons[r] {
				t.Errorf("no event %s: %v", r, reasons)
			}
		}
	}

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
