// Package localkube runs a local Kubernetes of one or three nodes on this
// machine, each node a network namespace on a bridge, for the tests of
// Steward above and inside Kubernetes and for users who want to try it
// (`make kube-up`). docs/kubernetes-local.md tells how it is built and what
// it changes on the machine; this comment states the invariants the code
// below keeps.
//
// Names. Everything created outside Config.Dir carries the prefix "lk",
// the PID of the owner process (the process that called Up; for
// `localkube up` the supervisor it leaves running) and K, the cluster's
// number in that process: the bridge lk<PID>b<K>, each node's veth
// lk<PID>v<K>-<I>, its network namespace lk<PID>n<K>-<node> and its cgroup
// lk<PID>c<K>-<node> in every cgroup hierarchy, the cgroup
// lk<PID>c<K>-infra of the processes that are no node's (the coordinator's
// steward commands, the S3 server). CleanupStale removes whatever carries
// the PID of a process no longer alive: the leftovers of a killed run.
//
// Processes. Every process the cluster runs joins its cgroup before it
// execs (a shell writes its own PID into cgroup.procs, then execs the
// program), so its children (containerd's shims, the containers, the
// agent's etcd members) are in the subtree too: teardown kills every PID in
// the subtree, then removes the groups, and nothing is left running.
//
// Mounts. Each node's containerd, kubelet and kube-proxy share one mount
// namespace of the node (made by a holder process with `unshare --mount
// --propagation slave`): mounts made there never reach the machine's.
// In it /etc and /var are overlays whose upper layers are the node's own
// (DIR/nodes/NODE/root/{etc,var}), so kubeadm's paths (/etc/kubernetes,
// /var/log/pods, /var/lib/cni) are the node's and the machine's stay as
// they are; /run is a tmpfs (containerd's shim sockets, the iptables lock);
// and files of the node bind-mounted over /proc/sys/vm/overcommit_memory,
// vm/panic_on_oom, kernel/panic, kernel/panic_on_oops and
// kernel/keys/root_max{keys,bytes} already hold the values the kubelet
// would write, so the machine's sysctls never change.
package localkube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/proc"
)

// Zones are the zones of the nodes in order: node I is labelled
// topology.kubernetes.io/zone=Zones[I].
var Zones = []string{"a", "b", "c"}

// Config says what cluster Up brings up.
type Config struct {
	// Dir holds everything of the cluster on disk (created 0700). It may
	// not be under /etc, /var or /run: the nodes' overlays there would
	// hide it from the nodes.
	Dir string
	// Nodes is 1 or 3; every node is a control-plane node.
	Nodes int
	// Version is the Kubernetes version, e.g. v1.36.3.
	Version string
	// KubeBin holds kubelet, kube-proxy (and kubectl) of Version.
	KubeBin string
	// Images are the image tarballs imported into every node's containerd:
	// the pause image, the kube components of Version, Steward's.
	Images []string
	// ExtraImages are imported into every node too, but while the
	// control plane starts (Up returns once they are in): images no static
	// pod runs, such as Steward's.
	ExtraImages []string
	// PauseImage is the pause image's reference (containerd's sandbox
	// image), one of Images.
	PauseImage string
	// CoreDNSImage is the cluster DNS's image reference
	// (registry.k8s.io/coredns/coredns:V), CoreDNSTarball its tarball,
	// imported into every node while the control plane starts, before
	// CoreDNS's Deployment is made (dns.go).
	CoreDNSImage, CoreDNSTarball string
	// ImageRepo is where the control-plane images are named:
	// ImageRepo/kube-apiserver:Version...
	ImageRepo string
	// Steward is the steward binary: the agent on each node and the
	// coordinator's commands.
	Steward string
	// BinaryStore, if set, is passed to `steward init` (the etcd versions
	// beyond the embedded one).
	BinaryStore string
	// VersityGW is the S3 server's binary.
	VersityGW string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Cluster is a running local Kubernetes. Its methods are not safe for
// concurrent use, except Down, which may run at once with Up's waits (a
// signal handler).
type Cluster struct {
	Config
	// Owner is the PID in every name.
	Owner int
	seq   int64 // the cluster's number in its owner (K in the names)
	// Subnet is the bridge's 10.x.y.0/24; Gateway its .1, the root
	// namespace's address on it, where the S3 server listens.
	Subnet  netip.Prefix
	Gateway string
	Bridge  string
	Nodes   []*Node

	// Kubeconfig is the admin's (system:masters) kubeconfig.
	Kubeconfig string
	// APIServer is the control-plane endpoint, https://IP:PORT.
	APIServer string
	// StewardDir is the coordinator's directory of the etcd cluster.
	StewardDir string
	// S3Endpoint, S3Bucket and S3CredentialsFile are the S3 server's
	// (AWS_ACCESS_KEY_ID=... lines).
	S3Endpoint        string
	S3Bucket          string
	S3CredentialsFile string

	// Timings of the last Up, by step.
	Timings []Timing

	mu              sync.Mutex // owns procs, down, stopProvisioner and lb
	procs           []*exec.Cmd
	down            bool
	stopProvisioner context.CancelFunc
	lb              *loadBalancer
}

// Timing is how long a step of Up took (Seconds: the same, in the state
// file).
type Timing struct {
	Step     string        `json:"step"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
}

// Node is one node of the cluster.
type Node struct {
	Name  string
	Index int // 0-based: zone Zones[Index], pod subnet 10.244.(Index+1).0/24
	Zone  string
	Addr  string // on the bridge
	Netns string // /run/netns/NAME
	Veth  string // its end on the bridge
	// Cgroup is the name of its group in each hierarchy (lk<PID>-<node>).
	Cgroup string
	// Dir is DIR/nodes/NAME.
	Dir string
	// PodSubnet is its pods' /24.
	PodSubnet string

	holder int // PID of the mount namespace's holder
}

// State is what DIR/cluster.json records: enough for another process
// (`localkube down`, the next Up) to find and remove the cluster.
type State struct {
	Owner             int      `json:"owner"`
	Version           string   `json:"version"`
	Nodes             []string `json:"nodes"`
	Subnet            string   `json:"subnet"`
	Kubeconfig        string   `json:"kubeconfig"`
	APIServer         string   `json:"apiServer"`
	StewardDir        string   `json:"stewardDir"`
	S3Endpoint        string   `json:"s3Endpoint"`
	S3Bucket          string   `json:"s3Bucket"`
	S3CredentialsFile string   `json:"s3CredentialsFile"`
	Ready             bool     `json:"ready"`
	Timings           []Timing `json:"timings,omitempty"`
}

// StateFile is the state's path in dir.
func StateFile(dir string) string { return filepath.Join(dir, "cluster.json") }

// ReadState reads dir's state.
func ReadState(dir string) (State, error) {
	var s State
	b, err := os.ReadFile(StateFile(dir))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", StateFile(dir), err)
	}
	return s, nil
}

func (c *Cluster) writeState(ready bool) error {
	s := State{Owner: c.Owner, Version: c.Version, Subnet: c.Subnet.String(), Kubeconfig: c.Kubeconfig,
		APIServer: c.APIServer, StewardDir: c.StewardDir, S3Endpoint: c.S3Endpoint, S3Bucket: c.S3Bucket,
		S3CredentialsFile: c.S3CredentialsFile, Ready: ready, Timings: append([]Timing(nil), c.Timings...)}
	for _, n := range c.Nodes {
		s.Nodes = append(s.Nodes, n.Name)
	}
	for i := range s.Timings {
		s.Timings[i].Seconds = s.Timings[i].Duration.Seconds()
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(StateFile(c.Dir), append(b, '\n'), 0o600)
}

// Check refuses a configuration Up cannot run, naming the problem; it
// changes nothing.
func (cfg Config) Check() error {
	var errs []error
	if cfg.Nodes != 1 && cfg.Nodes != 3 {
		errs = append(errs, fmt.Errorf("nodes: %d: a local cluster has 1 or 3 nodes", cfg.Nodes))
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil || cfg.Dir == "" {
		errs = append(errs, fmt.Errorf("directory %q: give an absolute path", cfg.Dir))
	}
	for _, p := range []string{"/etc", "/var", "/run"} {
		if abs == p || strings.HasPrefix(abs, p+"/") {
			errs = append(errs, fmt.Errorf("directory %s is under %s, which the nodes overlay: choose one elsewhere (under /tmp or the project's .cache)", abs, p))
		}
	}
	for _, b := range []string{"kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(cfg.KubeBin, b)); err != nil {
			errs = append(errs, &MissingBinaryError{Version: cfg.Version, Path: filepath.Join(cfg.KubeBin, b)})
			break
		}
	}
	if cfg.CoreDNSImage == "" || cfg.CoreDNSTarball == "" {
		errs = append(errs, fmt.Errorf("no CoreDNS image for the cluster DNS"))
	}
	for _, img := range append(append(cfg.Images, cfg.ExtraImages...), cfg.CoreDNSTarball) {
		if _, err := os.Stat(img); err != nil {
			errs = append(errs, fmt.Errorf("image tarball %s: %w", img, err))
			break
		}
	}
	if len(cfg.Images) == 0 {
		errs = append(errs, fmt.Errorf("no image to import into the nodes"))
	}
	for name, p := range map[string]string{"steward": cfg.Steward, "versitygw": cfg.VersityGW} {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("%s binary %q: %w", name, p, err))
		}
	}
	if err := CheckNodePackages(); err != nil {
		errs = append(errs, err)
	}
	if err := checkHostCgroups(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// MissingBinaryError: the Kubernetes binaries of a version are not built.
type MissingBinaryError struct{ Version, Path string }

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("Kubernetes %s is not built: %s is missing", e.Version, e.Path)
}

// MissingImageError: the images of a version are not built: no index
// (Ref empty), or the index lacks Ref.
type MissingImageError struct{ Version, Index, Ref string }

func (e *MissingImageError) Error() string {
	if e.Ref == "" {
		return fmt.Sprintf("no images for Kubernetes %s: %s is missing", e.Version, e.Index)
	}
	return fmt.Sprintf("the image %s of Kubernetes %s is not built (not in %s)", e.Ref, e.Version, e.Index)
}

// MissingPackagesError: containerd, runc, the CNI plugins, iptables or
// conntrack are not installed.
type MissingPackagesError struct{ Missing []string }

func (e *MissingPackagesError) Error() string {
	return fmt.Sprintf("this machine lacks %s, which every node runs", strings.Join(e.Missing, ", "))
}

// AptLine is the command that installs what MissingPackagesError names.
const AptLine = "apt-get update && apt-get install -y --no-install-recommends containerd runc containernetworking-plugins iptables conntrack iproute2"

// CheckNodePackages says which of the Debian parts a node runs are missing.
func CheckNodePackages() error {
	var missing []string
	for _, p := range []string{"containerd", "ctr", "runc", "iptables", "conntrack", "nsenter", "unshare", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = append(missing, "the CNI plugins (/usr/lib/cni)")
	}
	if len(missing) > 0 {
		return &MissingPackagesError{Missing: missing}
	}
	return nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "localkube: "+format+"\n", args...)
	}
}

// step runs f and records its duration.
func (c *Cluster) step(name string, f func() error) error {
	start := time.Now()
	err := f()
	d := time.Since(start).Round(time.Millisecond)
	c.Timings = append(c.Timings, Timing{Step: name, Duration: d})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	c.logf("%s (%s)", name, d)
	return nil
}

// Up brings a cluster up and returns it once every node is Ready, the
// default StorageClass exists, the S3 server answers and the cluster DNS
// resolves the API server's Service. On failure it
// removes everything it made and returns the error. ctx bounds the
// bring-up only; the cluster runs until Down.
func Up(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	cfg.Dir, _ = filepath.Abs(cfg.Dir)
	if _, err := CleanupStale(); err != nil {
		return nil, fmt.Errorf("remove the leftovers of killed runs: %w", err)
	}
	if s, err := ReadState(cfg.Dir); err == nil {
		if proc.Alive(s.Owner) {
			return nil, fmt.Errorf("directory %s holds a running cluster (owner PID %d): remove it first", cfg.Dir, s.Owner)
		}
	}
	if err := clearDir(cfg.Dir); err != nil {
		return nil, err
	}
	c = &Cluster{Config: cfg, Owner: os.Getpid()}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = errors.Join(err, fmt.Errorf("remove the half-made cluster: %w", derr))
			}
		}
	}()
	start := time.Now()
	if err := c.step("network and nodes' namespaces", c.makeNetwork); err != nil {
		return c, err
	}
	if err := c.step("certificates and kubeconfigs", c.makePKI); err != nil {
		return c, err
	}
	if err := c.step("etcd (Steward)", func() error { return c.startEtcd(ctx) }); err != nil {
		return c, err
	}
	if err := c.step("S3 server", func() error { return c.startS3(ctx) }); err != nil {
		return c, err
	}
	if err := c.step("nodes' containerd and images", func() error { return c.startRuntimes(ctx) }); err != nil {
		return c, err
	}
	if err := c.step("kubelets and kube-proxies", func() error { return c.startKubelets(ctx) }); err != nil {
		return c, err
	}
	extra, dnsImage := make(chan error, 1), make(chan error, 1)
	extraStart := time.Now()
	// CoreDNS's image first, alone (the import of Steward's large image
	// beside it would slow it down), then the others.
	go func() {
		err := c.importImages(ctx, []string{c.CoreDNSTarball})
		dnsImage <- err
		if err != nil {
			extra <- err
			return
		}
		extra <- c.importImages(ctx, c.ExtraImages)
	}()
	// CoreDNS is deployed as soon as the API server is ready (and its image
	// imported): its pods are scheduled when the nodes become Ready, and it
	// comes up while the add-ons wait for the controller-manager's first
	// run (the default service account).
	// On a failure elsewhere, dnsCancel stops its wait at once.
	dnsCtx, dnsCancel := context.WithCancel(ctx)
	defer dnsCancel()
	dnsDone := make(chan error, 1)
	var dnsStart time.Time
	dnsStarted := false
	apiReady := func() {
		dnsStart, dnsStarted = time.Now(), true
		go func() { dnsDone <- c.dns(dnsCtx, dnsImage) }()
	}
	if err := c.step("API server ready, nodes Ready", func() error { return c.waitReady(ctx, apiReady) }); err != nil {
		dnsCancel()
		<-extra
		if dnsStarted {
			<-dnsDone
		} else {
			<-dnsImage
		}
		return c, err
	}
	if err := c.step("cluster add-ons", func() error { return c.addOns(ctx) }); err != nil {
		dnsCancel()
		<-extra
		<-dnsDone
		return c, err
	}
	if err := c.step("cluster DNS answering: waited for", func() error { return <-dnsDone }); err != nil {
		<-extra
		return c, err
	}
	c.Timings = append(c.Timings, Timing{Step: "cluster DNS answering, since the API server was ready", Duration: time.Since(dnsStart).Round(time.Millisecond)})
	if err := c.step("other images imported: waited for", func() error { return <-extra }); err != nil {
		return c, err
	}
	c.Timings = append(c.Timings, Timing{Step: "other images imported, since the kubelets started", Duration: time.Since(extraStart).Round(time.Millisecond)})
	c.Timings = append(c.Timings, Timing{Step: "total", Duration: time.Since(start).Round(time.Millisecond)})
	c.logf("cluster of %d node(s) Ready in %s", len(c.Nodes), time.Since(start).Round(time.Millisecond))
	return c, c.writeState(true)
}

// clearDir empties dir of a previous cluster's files (refusing when a mount
// is still under it, or when dir is not a cluster's directory) and creates
// it 0700.
func clearDir(dir string) error {
	if err := checkClusterDir(dir); err != nil {
		return err
	}
	if m := mountsUnder(dir); len(m) > 0 {
		return fmt.Errorf("directory %s still has mounts under it (%s): unmount them first", dir, strings.Join(m, ", "))
	}
	for _, sub := range []string{"nodes", "steward", "pki", "s3", "logs", "cluster.json", "kubeconfig"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o700)
}

// checkClusterDir refuses a directory Up may not clear: one that exists,
// holds no cluster.json and has anything but localkube.log (which `localkube
// up` writes before its supervisor calls Up) in it. Clearing removes nodes/,
// pki/, s3/, logs/... of whatever directory --dir names.
func checkClusterDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(StateFile(dir)); err == nil {
		return nil
	}
	for _, e := range ents {
		if e.Name() != "localkube.log" {
			return fmt.Errorf("directory %s is not empty (%s) and holds no cluster (no cluster.json): give a new or empty directory", dir, e.Name())
		}
	}
	return nil
}
