package harness

// Hosts: Linux network namespaces on this machine, so an end-to-end test can
// run one Steward agent per "host", each with its own address, cut hosts
// off (Host.Cut, Host.CutSilently) and, where the kernel has netem, slow
// their links (Host.Delay); without netem, Host.DelayLink (delaylink.go)
// delays a host's connections to an address through a userspace proxy.
//
// A Network is a bridge in the root namespace with the address SUBNET.1/24
// (the test process, a coordinator or an S3 server in the root namespace
// listen or dial there); each Host is a namespace joined to the bridge by a
// veth pair, with the address SUBNET.N/24 on its end (eth0) and loopback up.
// SUBNET is a 10.x.y.0/24 no address of the machine overlaps, picked under a
// machine-wide lock so two test processes never share one. Host namespaces
// have no default route: their processes reach the subnet and loopback
// only, which is all the traffic the tests may send.
//
// Names carry the prefix "stw", the test process's PID and a counter of the
// process (interface names are 15 bytes at most): the bridge stw<PID>b<K>,
// a host's veth (its bridge end) stw<PID>v<K>, its namespace
// stw<PID>n<K>-<host name>. Cleanup removes everything a Network created,
// pass or fail; CleanupStale (run by the first NewNetwork of a process)
// removes what a crashed test process left, whose PID is no longer alive.

import (
	"context"
	"errors"
	"fmt"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/internal/subnet"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// netnsPrefix begins the name of every namespace and interface the hosts
// harness creates: stw<PID><kind><counter>, kind b (bridge), v (veth) or n
// (namespace).
const netnsPrefix = "stw"

// netnsName matches those names and captures the PID.
var netnsName = regexp.MustCompile(`^` + netnsPrefix + `([0-9]+)[bvn][0-9]+`)

// hostName is what a host's name may be: it ends its namespace's name.
var hostName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// netnsDir is where `ip netns add` mounts named namespaces.
const netnsDir = "/run/netns"

var (
	netnsCounter atomic.Int64 // bridges and hosts of this process
	staleOnce    sync.Once
)

// Network is a bridge in the root namespace plus one namespace per host
// (AddHost). Its methods are safe for concurrent use.
type Network struct {
	// Bridge is the bridge's interface name in the root namespace.
	Bridge string
	// Subnet is the network's 10.x.y.0/24.
	Subnet netip.Prefix
	// Addr is the root namespace's address on the network (SUBNET.1):
	// servers of the test process that hosts must reach listen on it.
	Addr string

	tb    testing.TB
	mu    sync.Mutex
	hosts []*Host
	next  int // last octet of the next host's address
}

// Host is one network namespace on a Network.
type Host struct {
	// Name is the test's name for the host.
	Name string
	// Addr is the host's address, e.g. 10.213.7.2.
	Addr string
	// Netns is the namespace's name (`ip netns exec NETNS ...`).
	Netns string
	// Link is the host's veth in the root namespace, attached to the
	// bridge; its peer is eth0 inside the namespace.
	Link string

	mu       sync.Mutex
	linkDown bool // Cut
	portOff  bool // CutSilently
	delayed  bool // Delay: a netem qdisc on both ends
	// delayRules: DelayLink made the table of redirect rules in the
	// namespace (and registered its removal).
	delayRules bool
}

// NewNetwork creates a bridge with the address SUBNET.1/24 in the root
// namespace, SUBNET being a 10.x.y.0/24 not in use on the machine. Cleanup
// removes it and every host added to it when the test ends, pass or fail.
// It needs root and iproute2; without them the test fails.
func NewNetwork(tb testing.TB) *Network {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("the hosts harness (network namespaces, veth pairs, a bridge) needs root: run the tests as root")
	}
	for _, bin := range []string{"ip", "bridge", "tc"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("the hosts harness needs %s (Debian: apt-get install iproute2): %v", bin, err)
		}
	}
	staleOnce.Do(func() { tb.Helper(); CleanupStale(tb) })

	n := &Network{tb: tb, next: 2, Bridge: ifName(tb, 'b', netnsCounter.Add(1))}
	tb.Cleanup(n.cleanup)
	unlock, err := subnet.Lock()
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	if n.Subnet, err = subnet.Free(); err != nil {
		tb.Fatal(err)
	}
	n.Addr = n.hostAddr(1)
	if err := ipCmds(
		[]string{"link", "add", n.Bridge, "type", "bridge"},
		[]string{"addr", "add", n.Addr + "/24", "dev", n.Bridge},
		[]string{"link", "set", n.Bridge, "up"},
	); err != nil {
		tb.Fatalf("create network bridge %s (%s): %v", n.Bridge, n.Subnet, err)
	}
	tb.Logf("network %s on bridge %s", n.Subnet, n.Bridge)
	return n
}

// AddHost creates a namespace joined to the bridge: a veth pair with eth0
// (address SUBNET.N/24) inside the namespace and the other end on the
// bridge, and loopback up. The host goes with its network's cleanup.
func (n *Network) AddHost(tb testing.TB, name string) *Host {
	tb.Helper()
	if !hostName.MatchString(name) {
		tb.Fatalf("host name %q: use 1 to 32 of a-z, 0-9 and -", name)
	}
	n.mu.Lock()
	if n.next > 254 {
		n.mu.Unlock()
		tb.Fatalf("network %s is full", n.Subnet)
	}
	k := netnsCounter.Add(1)
	h := &Host{
		Name:  name,
		Addr:  n.hostAddr(n.next),
		Netns: fmt.Sprintf("%s%dn%d-%s", netnsPrefix, os.Getpid(), k, name),
		Link:  ifName(tb, 'v', k),
	}
	n.next++
	// Recorded before anything exists, so cleanup removes a half-made host.
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	if err := ipCmds(
		[]string{"netns", "add", h.Netns},
		[]string{"link", "add", h.Link, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
		[]string{"link", "set", h.Link, "master", n.Bridge},
		[]string{"link", "set", h.Link, "up"},
		[]string{"-n", h.Netns, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		[]string{"-n", h.Netns, "link", "set", "eth0", "up"},
		[]string{"-n", h.Netns, "link", "set", "lo", "up"},
	); err != nil {
		tb.Fatalf("add host %s: %v", name, err)
	}
	tb.Logf("host %s: %s in namespace %s (veth %s)", name, h.Addr, h.Netns, h.Link)
	return h
}

// hostAddr is SUBNET.last.
func (n *Network) hostAddr(last int) string {
	b := n.Subnet.Addr().As4()
	b[3] = byte(last)
	return netip.AddrFrom4(b).String()
}

// cleanup kills every process left in the hosts' namespaces and deletes
// the namespaces, veths and the bridge.
func (n *Network) cleanup() {
	n.mu.Lock()
	hosts := n.hosts
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, removeLink(h.Link), removeNetns(h.Netns))
	}
	errs = append(errs, removeLink(n.Bridge))
	if err := errors.Join(errs...); err != nil {
		n.tb.Errorf("cleanup of network %s: %v", n.Subnet, err)
	}
}

// Command returns a command that runs name with args inside the host's
// namespace (`ip netns exec NETNS name args...`, which execs name: the
// command's process is name's). Start it with Host.Start, or make sure it
// ends: the network's cleanup kills whatever is left in the namespace, but
// cannot wait for a process the test started itself.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Netns, name}, args...)...)
}

// Process is a command Host.Start started.
type Process struct {
	// Cmd is the started command; Process.Wait, not Cmd.Wait, waits.
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's; read after done is closed
}

// Start starts cmd (from Command) in a process group of its own, and kills
// that group when the test ends.
func (h *Host) Start(tb testing.TB, cmd *exec.Cmd) *Process {
	tb.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s on host %s: %v", strings.Join(cmd.Args, " "), h.Name, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	tb.Cleanup(p.Kill)
	return p
}

// Wait waits for the process to exit and returns cmd.Wait's error.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Kill kills the process's group with SIGKILL and waits for the process.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Cut isolates the host from every other host and from the root namespace
// by setting its veth on the bridge down: the host's eth0 loses its
// carrier. Heal undoes it.
func (h *Host) Cut(tb testing.TB) {
	tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := ipCmds([]string{"link", "set", h.Link, "down"}); err != nil {
		tb.Fatalf("cut host %s: %v", h.Name, err)
	}
	h.linkDown = true
}

// CutSilently isolates the host as Cut does, but with every link up: the
// bridge drops every frame to and from the host's port (port state
// disabled), so packets vanish and connections time out, as behind a
// broken switch. Heal undoes it. (The other way to drop every packet, tc
// netem loss 100%, needs the kernel's netem qdisc, which the project's
// machines do not have.)
func (h *Host) CutSilently(tb testing.TB) {
	tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := run("bridge", "link", "set", "dev", h.Link, "state", "0"); err != nil {
		tb.Fatalf("cut host %s silently: %v", h.Name, err)
	}
	h.portOff = true
}

// Heal undoes Cut and CutSilently (a Delay stays).
func (h *Host) Heal(tb testing.TB) {
	tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.linkDown {
		if err := ipCmds([]string{"link", "set", h.Link, "up"}); err != nil {
			tb.Fatalf("heal host %s: %v", h.Name, err)
		}
		h.linkDown = false
	}
	if h.portOff {
		// 3: forwarding, a port's state while the bridge runs no STP.
		if err := run("bridge", "link", "set", "dev", h.Link, "state", "3"); err != nil {
			tb.Fatalf("heal host %s: %v", h.Name, err)
		}
		h.portOff = false
	}
}

// Delay delays every packet on the host's link by d each way (tc netem on
// both ends of its veth pair): a round trip between the host and the root
// namespace takes at least 2d more, between two delayed hosts 4d. Zero
// removes the delay. It needs the kernel's netem qdisc
// (CONFIG_NET_SCH_NETEM): without it, Delay fails the test saying so.
func (h *Host) Delay(tb testing.TB, d time.Duration) {
	tb.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if d == 0 && !h.delayed {
		return
	}
	for _, ns := range []string{"", h.Netns} {
		args, dev := []string{}, h.Link
		if ns != "" {
			args, dev = []string{"-n", ns}, "eth0"
		}
		if d == 0 {
			args = append(args, "qdisc", "del", "dev", dev, "root")
		} else {
			args = append(args, "qdisc", "replace", "dev", dev, "root", "netem", "delay", strconv.FormatInt(d.Microseconds(), 10)+"us")
		}
		if err := run("tc", args...); err != nil {
			if strings.Contains(err.Error(), "qdisc kind is unknown") {
				err = fmt.Errorf("%w (this kernel has no netem qdisc: CONFIG_NET_SCH_NETEM is not set)", err)
			}
			tb.Fatalf("delay host %s: %v", h.Name, err)
			return // a TB whose Fatalf returns (the harness's own test)
		}
	}
	h.delayed = d != 0
}

// CheckNetem says whether Delay can work here: nil when the kernel has the
// netem qdisc, else the error of `tc qdisc add dev lo root netem delay 0ms`
// in a throwaway namespace (without netem: "Specified qdisc kind is
// unknown", CONFIG_NET_SCH_NETEM not set). A caller that can go on without
// a delay checks first, since Delay fails the test. It needs root and
// iproute2, as NewNetwork does, and leaves nothing behind: the namespace,
// named like a host's so that CleanupStale finds it after a crash, is
// deleted before it returns.
func CheckNetem() (err error) {
	ns := fmt.Sprintf("%s%dn%d-netem", netnsPrefix, os.Getpid(), netnsCounter.Add(1))
	if err := ipCmds([]string{"netns", "add", ns}); err != nil {
		return fmt.Errorf("check for netem: %w", err)
	}
	defer func() {
		if rerr := removeNetns(ns); rerr != nil {
			err = errors.Join(err, fmt.Errorf("check for netem: %w", rerr))
		}
	}()
	if err := run("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"); err != nil {
		if strings.Contains(err.Error(), "qdisc kind is unknown") {
			err = fmt.Errorf("%w (this kernel has no netem qdisc: CONFIG_NET_SCH_NETEM is not set)", err)
		}
		return err
	}
	return nil
}

// CleanupStale removes the namespaces and interfaces a hosts harness of
// another test process left behind (one that crashed or was killed before
// its cleanup ran): those whose name carries the prefix and a PID that is
// no longer alive. It kills the processes still running in such
// namespaces first. NewNetwork runs it once per process.
func CleanupStale(tb testing.TB) {
	tb.Helper()
	stale := func(name string) bool {
		m := netnsName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		return err == nil && pid != os.Getpid() && !proc.Alive(pid)
	}
	var errs []error
	var removed []string
	ifs, err := net.Interfaces()
	if err != nil {
		errs = append(errs, err)
	}
	// Veths (deleting one deletes its peer in a namespace), bridges, then
	// namespaces.
	for _, kind := range []byte{'v', 'b'} {
		for _, i := range ifs {
			if stale(i.Name) && kindOf(i.Name) == kind {
				removed = append(removed, i.Name)
				errs = append(errs, removeLink(i.Name))
			}
		}
	}
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range ents {
		if stale(e.Name()) {
			removed = append(removed, e.Name())
			errs = append(errs, removeNetns(e.Name()))
		}
	}
	if len(removed) > 0 {
		tb.Logf("removed leftovers of dead test processes: %s", strings.Join(removed, " "))
	}
	if err := errors.Join(errs...); err != nil {
		tb.Errorf("remove leftovers of dead test processes: %v", err)
	}
}

// kindOf is the kind letter of a harness name (b, v or n), 0 for others.
func kindOf(name string) byte {
	m := netnsName.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	return name[len(netnsPrefix)+len(m[1])]
}

// ifName is the name of this process's interface of kind (b or v) with
// counter k: stw<PID><kind><K>, at most 15 bytes (Linux's IFNAMSIZ).
func ifName(tb testing.TB, kind byte, k int64) string {
	tb.Helper()
	name := fmt.Sprintf("%s%d%c%d", netnsPrefix, os.Getpid(), kind, k)
	if len(name) > 15 {
		tb.Fatalf("interface name %s is longer than 15 bytes", name)
	}
	return name
}

// removeNetns kills every process in the namespace, then deletes it. A
// namespace that does not exist is fine.
func removeNetns(ns string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := Poll(10*time.Second, 20*time.Millisecond, func() error {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return fmt.Errorf("ip netns pids %s: %v", ns, err)
		}
		// Never this process: a thread of it may be in the namespace a
		// moment (Host.InNetns), and ip lists the process then.
		self := strconv.Itoa(os.Getpid())
		pids := slices.DeleteFunc(strings.Fields(string(out)), func(p string) bool { return p == self })
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return fmt.Errorf("processes left in namespace %s: %s", ns, strings.Join(pids, " "))
	})
	if err != nil {
		return err
	}
	return ipCmds([]string{"netns", "del", ns})
}

// removeLink deletes an interface of the root namespace (deleting a veth
// deletes its peer too). One that does not exist is fine.
func removeLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	err := ipCmds([]string{"link", "del", name})
	if _, gone := net.InterfaceByName(name); gone != nil {
		return nil // gone meanwhile: a veth whose namespace was deleted
	}
	return err
}

// ipCmds runs `ip ARGS` for each argument list in turn, up to the first
// failure.
func ipCmds(cmds ...[]string) error {
	for _, args := range cmds {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// run runs a command and returns an error with its output when it fails.
func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
