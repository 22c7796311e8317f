package localkube

// Cluster DNS, as kubeadm's CoreDNS add-on sets it up
// (cmd/kubeadm/app/phases/addons/dns): the ServiceAccount coredns, the
// ClusterRole and ClusterRoleBinding system:coredns, the ConfigMap coredns
// (kubeadm's Corefile), the Deployment coredns (k8s-app=kube-dns, two
// replicas, preferably on two nodes) and the Service kube-dns at the tenth
// address of the service CIDR, which every kubelet's clusterDNS names.
//
// Invariants: the CoreDNS image is in every node's containerd before the
// Deployment exists (its pods never pull: imagePullPolicy Never, and a
// missing image would put them in a back-off); Up returns only once a
// query sent from a node to the Service's address is answered with the
// API Service's ClusterIP, so a pod started after Up resolves names.
//
// Upstreams: kubeadm forwards what is not the cluster's to the node's
// /etc/resolv.conf. The nodes' /etc is an overlay of the machine's, so
// that is the machine's file. A loopback nameserver in it (a local caching
// resolver, 127.0.0.53) would be CoreDNS itself inside its pod: the loop
// plugin would find the loop and stop CoreDNS. So forward goes to
// /etc/resolv.conf only when every nameserver there is not loopback, to
// the others by address when some are, and is left out (with loop, which
// then has nothing to check) when none is left: the cluster's names still
// resolve, others get SERVFAIL.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	// ClusterDomain is the cluster's DNS domain (every kubelet's
	// clusterDomain).
	ClusterDomain = "cluster.local"
	// DNSService is the cluster DNS Service in kube-system, as kubeadm
	// names it.
	DNSService = "kube-dns"
	// DNSDeployment is CoreDNS's Deployment (and ServiceAccount and
	// ConfigMap) in kube-system.
	DNSDeployment = "coredns"
)

// DNSServiceIP is the cluster DNS Service's ClusterIP: the tenth address
// of the service CIDR, as kubeadm picks it (10.96.0.10).
var DNSServiceIP = nthAddr(serviceCIDR, 10)

// APIServiceIP is the ClusterIP of the API server's Service,
// kubernetes.default: the first address of the service CIDR.
var APIServiceIP = nthAddr(serviceCIDR, 1)

func nthAddr(cidr string, n int) string {
	a := netip.MustParsePrefix(cidr).Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a.String()
}

// Corefile is kubeadm's Corefile for the cluster domain, forwarding to
// upstream: "/etc/resolv.conf", addresses separated by spaces, or "" for
// no forward (and no loop).
func Corefile(upstream string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes %[1]s in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
`, ClusterDomain)
	if upstream != "" {
		fmt.Fprintf(&b, `    forward . %s {
       max_concurrent 1000
    }
`, upstream)
	}
	fmt.Fprintf(&b, `    cache 30 {
       disable success %[1]s
       disable denial %[1]s
    }
`, ClusterDomain)
	if upstream != "" {
		b.WriteString("    loop\n")
	}
	b.WriteString("    reload\n    loadbalance\n}\n")
	return b.String()
}

// Upstream says where CoreDNS forwards, from the content of the node's
// resolv.conf (the comment at the top of this file says why).
func Upstream(resolvConf []byte) string {
	var all, kept []string
	sc := bufio.NewScanner(strings.NewReader(string(resolvConf)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue // a resolver ignores it too
		}
		all = append(all, f[1])
		if !a.IsLoopback() && !a.IsUnspecified() {
			kept = append(kept, a.String())
		}
	}
	switch {
	case len(kept) == 0:
		return ""
	case len(kept) == len(all):
		return "/etc/resolv.conf"
	}
	return strings.Join(kept, " ")
}

// dns waits for the CoreDNS image's import (imported), deploys CoreDNS
// and waits until it answers.
func (c *Cluster) dns(ctx context.Context, imported <-chan error) error {
	cs, err := c.Client()
	if err != nil {
		<-imported
		return err
	}
	if err := <-imported; err != nil {
		return err
	}
	if err := c.startDNS(ctx, cs); err != nil {
		return err
	}
	return c.waitDNS(ctx, cs)
}

// startDNS creates kubeadm's CoreDNS objects, the Deployment last.
func (c *Cluster) startDNS(ctx context.Context, cs *kubernetes.Clientset) error {
	const ns = "kube-system"
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	labels := map[string]string{"k8s-app": "kube-dns"}
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	meta := metav1.ObjectMeta{Name: DNSDeployment, Namespace: ns}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
	if err := create("service account coredns", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	if err := create("cluster role system:coredns", err); err != nil {
		return err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: DNSDeployment, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err := create("cluster role binding system:coredns", err); err != nil {
		return err
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta,
		Data: map[string]string{"Corefile": Corefile(Upstream(resolv))}}, metav1.CreateOptions{})
	if err := create("config map coredns", err); err != nil {
		return err
	}
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: DNSService, Namespace: ns,
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Selector:  labels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			},
		},
	}, metav1.CreateOptions{})
	if err := create("service kube-dns", err); err != nil {
		return err
	}
	_, err = cs.AppsV1().Deployments(ns).Create(ctx, c.dnsDeployment(labels), metav1.CreateOptions{})
	return create("deployment coredns", err)
}

// dnsDeployment is kubeadm's CoreDNS Deployment with the cluster's image,
// never pulled.
func (c *Cluster) dnsDeployment(labels map[string]string) *appsv1.Deployment {
	replicas := int32(2)
	maxUnavailable := intstr.FromInt32(1)
	no := false
	probe := func(path, port string, delay, timeout, failures, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(port), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: delay, TimeoutSeconds: timeout, SuccessThreshold: 1, FailureThreshold: failures, PeriodSeconds: period,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: DNSDeployment, Namespace: "kube-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable}},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: DNSDeployment,
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
							Weight: 100,
							PodAffinityTerm: corev1.PodAffinityTerm{
								LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
									{Key: "k8s-app", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-dns"}},
								}},
								TopologyKey: "kubernetes.io/hostname",
							},
						}},
					}},
					Tolerations: []corev1.Toleration{
						{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
					},
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Containers: []corev1.Container{{
						Name:            "coredns",
						Image:           c.CoreDNSImage,
						ImagePullPolicy: corev1.PullNever,
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
						},
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							{ContainerPort: 53, Name: "dns", Protocol: corev1.ProtocolUDP},
							{ContainerPort: 53, Name: "dns-tcp", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 9153, Name: "metrics", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 8080, Name: "liveness-probe", Protocol: corev1.ProtocolTCP},
							{ContainerPort: 8181, Name: "readiness-probe", Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe: probe("/health", "liveness-probe", 60, 5, 5, 10),
						// kubeadm's readiness period is 10 s; here 2 s. A kubelet
						// started less than one period ago delays each new prober
						// by a random part of the period (pkg/kubelet/prober's
						// worker), and the first probe usually finds CoreDNS not
						// yet ready: with 10 s the Service answered 1.5 to 11 s
						// after the add-ons, the largest variable part of the
						// bring-up.
						ReadinessProbe: probe("/ready", "readiness-probe", 0, 1, 3, 2),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &no,
							Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							ReadOnlyRootFilesystem:   func() *bool { b := true; return &b }(),
						},
					}},
					DNSPolicy: corev1.DNSDefault,
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: DNSDeployment},
						Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
					}}}},
				},
			},
		},
	}
}

// waitDNS waits until the cluster DNS Service answers, from the first
// node's network namespace (through kube-proxy's rules, as a pod's query
// goes), that kubernetes.default.svc.cluster.local is APIServiceIP. On a
// timeout it says what the CoreDNS pods are doing.
func (c *Cluster) waitDNS(ctx context.Context, cs *kubernetes.Clientset) error {
	name := "kubernetes.default.svc." + ClusterDomain + "."
	err := poll(ctx, 2*time.Minute, func() error {
		addrs, err := LookupInNetns(ctx, filepath.Join(netnsDir, c.Nodes[0].Netns), DNSServiceIP+":53", name)
		if err != nil {
			return err
		}
		if !slices.Contains(addrs, APIServiceIP) {
			return fmt.Errorf("%s is %v, not %s", name, addrs, APIServiceIP)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	pods, lerr := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if lerr != nil {
		return fmt.Errorf("cluster DNS %s: %w", DNSServiceIP, err)
	}
	var states []string
	for _, p := range pods.Items {
		s := fmt.Sprintf("%s on %q: %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Waiting != nil {
				s += " (" + st.State.Waiting.Reason + ": " + st.State.Waiting.Message + ")"
			}
			s += fmt.Sprintf(", ready %v, %d restarts", st.Ready, st.RestartCount)
		}
		states = append(states, s)
	}
	return fmt.Errorf("cluster DNS %s: %w; CoreDNS pods: %s (logs: %s)", DNSServiceIP, err, strings.Join(states, "; "),
		filepath.Join(c.Dir, "nodes", "*", "root", "var", "upper", "log", "pods", "kube-system_coredns-*"))
}

// LookupInNetns asks the DNS server at server (IP:PORT) for the A records
// of name (fully qualified) over UDP from the network namespace at netns,
// and returns the addresses of the answer. The socket is made on a thread
// that entered the namespace, so it belongs to it; the thread goes back to
// this process's namespace after, or, if it cannot, dies with its
// goroutine.
func LookupInNetns(ctx context.Context, netns, server, name string) ([]string, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter %s: %w", netns, err)}
			return
		}
		conn, err := net.Dial("udp", server)
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	defer r.conn.Close()
	deadline := time.Now().Add(2 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := r.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, err
	}
	id := uint16(time.Now().UnixNano())
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	b, err := q.Pack()
	if err != nil {
		return nil, err
	}
	if _, err := r.conn.Write(b); err != nil {
		return nil, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := r.conn.Read(buf)
		if err != nil {
			return nil, err
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil || m.ID != id || !m.Response {
			continue // not the answer to this query
		}
		if m.RCode != dnsmessage.RCodeSuccess {
			return nil, fmt.Errorf("%s: %s", name, m.RCode)
		}
		var addrs []string
		for _, a := range m.Answers {
			if rr, ok := a.Body.(*dnsmessage.AResource); ok {
				addrs = append(addrs, netip.AddrFrom4(rr.A).String())
			}
		}
		return addrs, nil
	}
}
