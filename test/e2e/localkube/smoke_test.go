package localkube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/internal/ociimage"
	"github.com/etcd-steward/steward/test/harness"
)

// probeRef is the image of test/e2e/localkube/kubeprobe, built and
// imported into every node once per test process (probeImage).
const probeRef = "localhost/kubeprobe:test"

var (
	probeMu sync.Mutex
	// probes holds each cluster's (by directory) import of the image,
	// once: owned by probeMu.
	probes = map[string]error{}
)

// probeImage builds kubeprobe (static), wraps it into an image tarball
// (internal/ociimage) and imports it into every node of c, once per
// cluster.
func probeImage(t *testing.T, c *localkube.Cluster) string {
	t.Helper()
	probeMu.Lock()
	defer probeMu.Unlock()
	err, done := probes[c.Dir]
	if !done {
		err = buildProbe(t, c)
		probes[c.Dir] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return probeRef
}

func buildProbe(t *testing.T, c *localkube.Cluster) error {
	dir := filepath.Join(c.Dir, "kubeprobe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	bin := filepath.Join(dir, "kubeprobe")
	cmd := exec.Command("go", "build", "-o", bin, "./test/e2e/localkube/kubeprobe")
	cmd.Dir = harness.RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build kubeprobe: %v: %s", err, out)
	}
	name, tag, _ := strings.Cut(probeRef, ":")
	tarball := filepath.Join(dir, "kubeprobe.tar")
	if _, err := ociimage.Write(context.Background(), ociimage.Spec{Name: name, Tag: tag,
		Files:      []ociimage.File{{Path: "/kubeprobe", Mode: 0o755, Source: bin}},
		Entrypoint: []string{"/kubeprobe"}}, tarball); err != nil {
		return err
	}
	return c.ImportImage(context.Background(), tarball)
}

// namespace creates a namespace for the test, deleted when it ends.
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

func probePod(name, ns, image string, labels map[string]string, args ...string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
}

// waitRunning waits for the pods to be Running.
func waitRunning(t *testing.T, cs *kubernetes.Clientset, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		harness.Eventually(t, 2*time.Minute, 200*time.Millisecond, "pod "+ns+"/"+name+" Running", func() error {
			p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %s: %v", p.Status.Phase, p.Status.ContainerStatuses)
			}
			return nil
		})
	}
}

// kubectl runs kubectl of the cluster's version and returns its stdout;
// a failure fails the test.
func kubectl(t *testing.T, c *localkube.Cluster, args ...string) string {
	t.Helper()
	cmd := c.Kubectl(t.Context(), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v: %s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// TestNodesAndControlPlane: every node Ready in its zone, labelled as a
// control-plane node, and running kube-apiserver, kube-controller-manager
// and kube-scheduler as static pods with kubeadm's labels and the images
// of the cluster's version; CoreDNS deployed as kubeadm does it.
func TestNodesAndControlPlane(t *testing.T) { harness.ForEachLocalKube(t, nodesAndControlPlane) }

func nodesAndControlPlane(t *testing.T, c *localkube.Cluster) {
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		node, err := cs.CoreV1().Nodes().Get(t.Context(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if z := node.Labels["topology.kubernetes.io/zone"]; z != n.Zone {
			t.Errorf("node %s: zone %q, want %q", n.Name, z, n.Zone)
		}
		if _, ok := node.Labels["node-role.kubernetes.io/control-plane"]; !ok {
			t.Errorf("node %s: no control-plane label: %v", n.Name, node.Labels)
		}
		if v := node.Status.NodeInfo.KubeletVersion; v != c.Version {
			t.Errorf("node %s: kubelet %s, want %s", n.Name, v, c.Version)
		}
		for _, comp := range localkube.ControlPlaneImages {
			name := comp + "-" + n.Name
			harness.Eventually(t, time.Minute, 200*time.Millisecond, "static pod "+name, func() error {
				p, err := cs.CoreV1().Pods("kube-system").Get(t.Context(), name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if p.Labels["component"] != comp || p.Labels["tier"] != "control-plane" {
					return fmt.Errorf("labels %v", p.Labels)
				}
				if img := p.Spec.Containers[0].Image; img != localkube.DefaultImageRepo+"/"+comp+":"+c.Version {
					return fmt.Errorf("image %s", img)
				}
				if p.Status.Phase != corev1.PodRunning {
					return fmt.Errorf("phase %s", p.Status.Phase)
				}
				return nil
			})
		}
	}
	// etcd beneath: a Steward cluster of one healthy member per node.
	out, err := exec.CommandContext(t.Context(), c.Steward, "status", "--dir", c.StewardDir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("steward status: %v: %s", err, out)
	}
	var st struct {
		Cluster struct {
			HealthyMembers int  `json:"healthyMembers"`
			Quorate        bool `json:"quorate"`
		} `json:"cluster"`
		Members []struct {
			ClientURL string `json:"clientURL"`
		} `json:"members"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	if st.Cluster.HealthyMembers != len(c.Nodes) || !st.Cluster.Quorate || len(st.Members) != len(c.Nodes) {
		t.Errorf("etcd: %d healthy of %d members (quorate %v), want one per node (%d): %s", st.Cluster.HealthyMembers, len(st.Members), st.Cluster.Quorate, len(c.Nodes), out)
	}
	// The cluster DNS, as kubeadm deploys it: two CoreDNS replicas of the
	// image kubeadm of the version names, ready (on two nodes when there
	// are three), behind kube-dns at the service CIDR's tenth address.
	if img := c.CoreDNSImage; !strings.HasPrefix(img, "registry.k8s.io/coredns/coredns:v") {
		t.Errorf("CoreDNS image %q", img)
	}
	harness.Eventually(t, time.Minute, 300*time.Millisecond, "CoreDNS ready", func() error {
		pods, err := cs.CoreV1().Pods("kube-system").List(t.Context(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
			}
			if !ready || p.Spec.Containers[0].Image != c.CoreDNSImage {
				return fmt.Errorf("pod %s: ready %v, image %s", p.Name, ready, p.Spec.Containers[0].Image)
			}
			nodes[p.Spec.NodeName] = true
		}
		if len(pods.Items) != 2 || len(c.Nodes) > 1 && len(nodes) != 2 {
			return fmt.Errorf("%d CoreDNS pods on nodes %v, want 2 (on 2 nodes when there are 3)", len(pods.Items), nodes)
		}
		return nil
	})
	dns, err := cs.CoreV1().Services("kube-system").Get(t.Context(), localkube.DNSService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dns.Spec.ClusterIP != "10.96.0.10" || len(dns.Spec.Ports) != 3 {
		t.Errorf("Service kube-dns: %s, ports %v; want 10.96.0.10 with 53/udp, 53/tcp, 9153", dns.Spec.ClusterIP, dns.Spec.Ports)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != c.Version {
		t.Errorf("API server %s, want %s", v.GitVersion, c.Version)
	}
}

// TestPodExecLogsService: a pod runs, kubectl exec and logs reach it, a
// ClusterIP Service answers a client pod through kube-proxy, the cluster
// DNS resolves kubernetes.default.svc.cluster.local and the Service's name
// to their ClusterIPs from the pod, and the S3 server answers from a pod.
func TestPodExecLogsService(t *testing.T) { harness.ForEachLocalKube(t, podExecLogsService) }

func podExecLogsService(t *testing.T, c *localkube.Cluster) {
	img := probeImage(t, c)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cs, "smoke")
	web := probePod("web", ns, img, map[string]string{"app": "web"}, "serve", ":8080")
	client := probePod("client", ns, img, nil, "sleep")
	if len(c.Nodes) > 1 {
		// Across nodes: the Service's traffic leaves the client's node.
		web.Spec.NodeName, client.Spec.NodeName = c.Nodes[0].Name, c.Nodes[1].Name
	}
	for _, p := range []*corev1.Pod{web, client} {
		if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := cs.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cs, ns, "web", "client")

	if out := kubectl(t, c, "exec", "-n", ns, "client", "--", "/kubeprobe", "hello"); out != "hello from client\n" {
		t.Errorf("exec: %q, want %q", out, "hello from client\n")
	}
	harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "logs of web", func() error {
		if out := kubectl(t, c, "logs", "-n", ns, "web"); !strings.Contains(out, "serving on :8080") {
			return fmt.Errorf("logs: %q", out)
		}
		return nil
	})
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	harness.Eventually(t, time.Minute, 500*time.Millisecond, "Service web from pod client", func() error {
		out, err := c.Kubectl(t.Context(), "exec", "-n", ns, "client", "--", "/kubeprobe", "get", url).CombinedOutput()
		if err != nil || string(out) != "200 hello from web\n" {
			return fmt.Errorf("get %s: %v: %q", url, err, out)
		}
		return nil
	})
	// The cluster DNS from a pod: the API server's Service and this test's.
	for _, name := range []struct{ name, want string }{
		{"kubernetes.default.svc.cluster.local", localkube.APIServiceIP},
		{"web." + ns + ".svc.cluster.local", svc.Spec.ClusterIP},
	} {
		harness.Eventually(t, 30*time.Second, 300*time.Millisecond, name.name+" from pod client", func() error {
			out, err := c.Kubectl(t.Context(), "exec", "-n", ns, "client", "--", "/kubeprobe", "resolve", name.name).CombinedOutput()
			if err != nil || string(out) != name.want+"\n" {
				return fmt.Errorf("resolve %s: %v: %q, want %s", name.name, err, out, name.want)
			}
			return nil
		})
	}
	out, err := c.Kubectl(t.Context(), "exec", "-n", ns, "client", "--", "/kubeprobe", "get", c.S3Endpoint+"/"+c.S3Bucket).CombinedOutput()
	// Anonymous: 403 from a server that answers S3; 2xx if it lets it be.
	code, _, _ := strings.Cut(string(out), " ")
	if err != nil || !(len(code) == 3 && code[0] == '2' || code == "403") {
		t.Errorf("S3 server %s from a pod: %v: %q, want 2xx or 403", c.S3Endpoint, err, out)
	}
}

// TestDefaultStorageClass: a claim without a class gets the default one, is
// bound once its pod is scheduled, and the pod writes there; deleting the
// claim deletes its volume and the volume's directory.
func TestDefaultStorageClass(t *testing.T) {
	c := harness.LocalKube(t)
	img := probeImage(t, c)
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, cs, "storage")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := probePod("writer", ns, img, nil, "sleep")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, cs, ns, "writer")
	got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.ClaimBound || got.Spec.StorageClassName == nil || *got.Spec.StorageClassName != localkube.StorageClass {
		t.Fatalf("claim: phase %s, class %v", got.Status.Phase, got.Spec.StorageClassName)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), got.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := pv.Spec.Local.Path
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("volume directory: %v", err)
	}
	// The pod writes in the volume; the file is in the node's directory.
	kubectl(t, c, "exec", "-n", ns, "writer", "--", "/kubeprobe", "write", "/data/written", "by writer")
	if b, err := os.ReadFile(filepath.Join(dir, "written")); err != nil || string(b) != "by writer" {
		t.Errorf("the pod's file in %s: %q, %v", dir, b, err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Minute, 300*time.Millisecond, "volume "+pv.Name+" and its directory deleted", func() error {
		if _, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("volume %s still there", pv.Name)
		}
		if _, err := os.Stat(dir); err == nil {
			return fmt.Errorf("directory %s still there", dir)
		}
		return nil
	})
}
