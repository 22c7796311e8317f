package localkube

// A node: its mount namespace (the holder), containerd, the images, the
// kubelet with the control plane's static pods, kube-proxy.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kubeletSysctls are the sysctls the kubelet sets at start
// (setupKernelTunables) and the values it wants: files holding them are
// bind-mounted over /proc/sys in the node's mount namespace.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// holderScript makes the node's mount namespace (it runs under `unshare
// --mount --propagation slave`), says so by creating $1/holder.ready, and
// then holds the namespace until killed.
const holderScript = `set -e
N="$1"
mount -t tmpfs -o mode=0755 localkube-run /run
mount -t overlay localkube-etc -o lowerdir=/etc,upperdir="$N/root/etc/upper",workdir="$N/root/etc/work" /etc
mount -t overlay localkube-var -o lowerdir=/var,upperdir="$N/root/var/upper",workdir="$N/root/var/work" /var
for f in "$N"/sysctl/*; do
	mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done
mount --bind /var/lib/kubelet /var/lib/kubelet
mount --make-rshared /var/lib/kubelet
touch "$N/holder.ready"
exec sleep infinity
`

// startRuntimes starts every node's mount namespace and containerd and
// imports the images, the nodes side by side.
func (c *Cluster) startRuntimes(ctx context.Context) error {
	return c.eachNode(func(n *Node) error {
		if err := c.startHolder(ctx, n); err != nil {
			return fmt.Errorf("node %s: mount namespace: %w", n.Name, err)
		}
		if err := c.startContainerd(ctx, n); err != nil {
			return fmt.Errorf("node %s: containerd: %w", n.Name, err)
		}
		return c.importInto(ctx, n, c.Images)
	})
}

// importImages imports image tarballs into every node, the nodes side by
// side.
func (c *Cluster) importImages(ctx context.Context, images []string) error {
	return c.eachNode(func(n *Node) error { return c.importInto(ctx, n, images) })
}

func (c *Cluster) importInto(ctx context.Context, n *Node, images []string) error {
	for _, img := range images {
		if _, err := c.run(ctx, n.Cgroup+"/system", "", 0, "ctr", "-a", n.containerdSock(), "-n", "k8s.io", "images", "import", img); err != nil {
			return fmt.Errorf("node %s: import %s: %w", n.Name, img, err)
		}
	}
	return nil
}

// eachNode runs f for every node at once and joins their errors.
func (c *Cluster) eachNode(f func(n *Node) error) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(n) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (n *Node) containerdSock() string { return filepath.Join(n.Dir, "containerd", "containerd.sock") }

func (c *Cluster) startHolder(ctx context.Context, n *Node) error {
	for _, d := range []string{"root/etc/upper", "root/etc/work", "root/var/upper/lib/kubelet", "root/var/upper/lib/kube-proxy", "root/var/upper/log", "root/var/work", "sysctl", "logs"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o700); err != nil {
			return err
		}
	}
	for k, v := range kubeletSysctls {
		if err := os.WriteFile(filepath.Join(n.Dir, "sysctl", strings.ReplaceAll(k, "/", ".")), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	cmd, done, err := c.start(n.Cgroup+"/system", n.Netns, 0, filepath.Join(n.Dir, "logs", "holder.log"),
		"unshare", "--mount", "--propagation", "slave", "/bin/sh", "-c", holderScript, "holder", n.Dir)
	if err != nil {
		return err
	}
	n.holder = cmd.Process.Pid
	// The node's agent reaches the manifests the kubelet reads through
	// this link (its --kube-manifests): into the node's mount namespace,
	// where /etc is the overlay. A write into the overlay's upper
	// directory from outside would be undefined for overlayfs and unseen
	// by the kubelet's inotify watch.
	link := n.KubeManifestsLink()
	_ = os.Remove(link)
	if err := os.Symlink(fmt.Sprintf("/proc/%d/root/etc/kubernetes/manifests", n.holder), link); err != nil {
		return err
	}
	return poll(ctx, 10*time.Second, func() error {
		select {
		case <-done:
			b, _ := os.ReadFile(filepath.Join(n.Dir, "logs", "holder.log"))
			return fmt.Errorf("exited: %s", strings.TrimSpace(string(b)))
		default:
		}
		_, err := os.Stat(filepath.Join(n.Dir, "holder.ready"))
		return err
	})
}

func (c *Cluster) startContainerd(ctx context.Context, n *Node) error {
	cd := filepath.Join(n.Dir, "containerd")
	for _, d := range []string{"root", "state", "cni/net.d", "cni/ipam", "opt"} {
		if err := os.MkdirAll(filepath.Join(cd, d), 0o700); err != nil {
			return err
		}
	}
	runc, err := exec.LookPath("runc") // Check found it
	if err != nil {
		return err
	}
	if runc, err = filepath.Abs(runc); err != nil {
		return err
	}
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  disable_apparmor = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = %[8]q

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = %[7]q
`, filepath.Join(cd, "root"), filepath.Join(cd, "state"), n.containerdSock(), n.containerdSock()+".ttrpc",
		filepath.Join(cd, "opt"), c.PauseImage, filepath.Join(cd, "cni", "net.d"), runc)
	if err := os.WriteFile(filepath.Join(cd, "config.toml"), []byte(conf), 0o600); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "localkube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.PodSubnet, filepath.Join(cd, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(cd, "cni", "net.d", "10-localkube.conflist"), []byte(cni), 0o600); err != nil {
		return err
	}
	// Pods' traffic leaving the cluster's pod network (to the S3 server,
	// the machine) leaves as the node's address: the bridge's side knows
	// no route to pods.
	if _, err := c.run(ctx, n.Cgroup+"/system", n.Netns, n.holder, "iptables", "-w", "-t", "nat", "-A", "POSTROUTING",
		"-s", n.PodSubnet, "!", "-d", podCIDR, "-m", "comment", "--comment", "localkube: pods to outside the pod network", "-j", "MASQUERADE"); err != nil {
		return err
	}
	log := filepath.Join(n.Dir, "logs", "containerd.log")
	_, done, err := c.start(n.Cgroup+"/system", n.Netns, n.holder, log, "containerd", "--config", filepath.Join(cd, "config.toml"))
	if err != nil {
		return err
	}
	return poll(ctx, 20*time.Second, func() error {
		select {
		case <-done:
			return fmt.Errorf("exited (log: %s)", log)
		default:
		}
		_, err := c.run(ctx, n.Cgroup+"/system", "", 0, "ctr", "-a", n.containerdSock(), "version")
		return err
	})
}

func (c *Cluster) startKubelets(ctx context.Context) error {
	if len(c.Nodes) > 1 {
		var backends []string
		for _, n := range c.Nodes {
			backends = append(backends, fmt.Sprintf("%s:%d", n.Addr, apiPort))
		}
		lb, err := startLoadBalancer(fmt.Sprintf("%s:%d", c.Gateway, apiPort), backends)
		if err != nil {
			return fmt.Errorf("control-plane load balancer: %w", err)
		}
		c.mu.Lock()
		down := c.down
		if !down {
			c.lb = lb
		}
		c.mu.Unlock()
		if down {
			lb.Close()
			return errors.New("the cluster is being removed")
		}
	}
	for _, n := range c.Nodes {
		if err := c.writeManifests(n); err != nil {
			return fmt.Errorf("node %s: static pods: %w", n.Name, err)
		}
		varLib := filepath.Join(n.Dir, "root", "var", "upper", "lib")
		kconf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
address: %[1]s
cgroupDriver: cgroupfs
cgroupRoot: /%[2]s
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
staticPodPath: /etc/kubernetes/manifests
clusterDomain: %[4]s
clusterDNS:
- %[5]s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
volumePluginDir: /var/lib/kubelet/volume-plugins
resolvConf: /etc/resolv.conf
protectKernelDefaults: false
`, n.Addr, n.Cgroup, n.containerdSock(), ClusterDomain, DNSServiceIP)
		if err := os.WriteFile(filepath.Join(varLib, "kubelet", "config.yaml"), []byte(kconf), 0o600); err != nil {
			return err
		}
		pconf := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: /etc/kubernetes/kube-proxy.conf
clusterCIDR: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  masqueradeAll: true
`, podCIDR, n.Name, n.Addr)
		if err := os.WriteFile(filepath.Join(varLib, "kube-proxy", "config.conf"), []byte(pconf), 0o600); err != nil {
			return err
		}
		group := n.Cgroup + "/system"
		if _, _, err := c.start(group, n.Netns, n.holder, filepath.Join(n.Dir, "logs", "kubelet.log"),
			filepath.Join(c.KubeBin, "kubelet"),
			"--config=/var/lib/kubelet/config.yaml",
			"--kubeconfig=/etc/kubernetes/kubelet.conf",
			"--root-dir=/var/lib/kubelet",
			"--hostname-override="+n.Name,
			"--node-ip="+n.Addr,
			"--node-labels=topology.kubernetes.io/zone="+n.Zone,
		); err != nil {
			return fmt.Errorf("node %s: kubelet: %w", n.Name, err)
		}
		if _, _, err := c.start(group, n.Netns, n.holder, filepath.Join(n.Dir, "logs", "kube-proxy.log"),
			filepath.Join(c.KubeBin, "kube-proxy"), "--config=/var/lib/kube-proxy/config.conf"); err != nil {
			return fmt.Errorf("node %s: kube-proxy: %w", n.Name, err)
		}
	}
	return nil
}

// imageRef is the control-plane image of a component.
func (c *Cluster) imageRef(component string) string {
	return c.ImageRepo + "/" + component + ":" + c.Version
}

func itoa(i int) string { return strconv.Itoa(i) }

// KubeManifestsLink is the node's static pod manifests directory as
// processes outside the node's mount namespace reach it (a symbolic link
// through its holder's /proc/PID/root), given to the node's agent as
// --kube-manifests.
func (n *Node) KubeManifestsLink() string { return filepath.Join(n.Dir, "kube-manifests") }

// ImportImage imports an image tarball into every node's containerd.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	return c.importImages(ctx, []string{tarball})
}

// Kubectl returns a kubectl command of the cluster's version with the
// admin's kubeconfig.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(c.KubeBin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
}
