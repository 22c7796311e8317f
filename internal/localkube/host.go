package localkube

// The machine's side: the bridge, the nodes' network namespaces, cgroups
// and mount namespaces, the processes started into them, and their removal
// (Down, CleanupStale).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/internal/subnet"
)

// prefix begins every name the package gives outside its directory.
const prefix = "lk"

// cgroupRoot is where the cgroup v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// netnsDir is where `ip netns add` mounts named network namespaces.
const netnsDir = "/run/netns"

// ownedName matches the names of interfaces (bridge lk<PID>b<K>, veths
// lk<PID>v<K>-<I>), network namespaces (lk<PID>n<K>-NODE) and cgroups
// (lk<PID>c<K>-NODE, lk<PID>c<K>-infra), K the cluster's number in its
// owner process (a process may run more than one), and captures the
// owner's PID.
var ownedName = regexp.MustCompile(`^` + prefix + `([0-9]+)(b[0-9]+|v[0-9]+-[0-9]+|[nc][0-9]+-[a-z0-9-]+)$`)

// clusters numbers the clusters of this process (K in the names).
var clusters atomic.Int64

// OwnedBy matches every name of the clusters of owner.
func OwnedBy(owner int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`%s%d[bvnc][0-9]`, prefix, owner))
}

// ownerOf is the owner PID in a name of this package, 0 for other names.
func ownerOf(name string) int {
	m := ownedName.FindStringSubmatch(name)
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// hierarchies are the cgroup hierarchies a node gets a group in: every
// cgroup mount directly under /sys/fs/cgroup (from /proc/self/mountinfo, so
// a plain directory there is not taken for one), the unified (v2) mount of a
// hybrid machine included (the kubelet makes its groups there too, for
// hugetlb). A pure v2 machine (cgroup2 mounted at /sys/fs/cgroup itself) has
// none; Check refuses it.
func hierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	hs := cgroupMounts(string(b))
	if len(hs) == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy under %s", cgroupRoot)
	}
	return hs, nil
}

// cgroupMounts returns the names (relative to cgroupRoot) of the cgroup and
// cgroup2 mounts directly under cgroupRoot in mountinfo, the text of
// /proc/self/mountinfo.
func cgroupMounts(mountinfo string) []string {
	var hs []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || sep+1 >= len(f) || (f[sep+1] != "cgroup" && f[sep+1] != "cgroup2") {
			continue
		}
		mp := f[4]
		if filepath.Dir(mp) != cgroupRoot || strings.Contains(mp, "\\") {
			continue // not directly under cgroupRoot, or a name with an escaped space
		}
		if name := filepath.Base(mp); !slices.Contains(hs, name) {
			hs = append(hs, name)
		}
	}
	return hs
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC, statfs's type of a cgroup v2 mount.
const cgroup2Magic = 0x63677270

// checkHostCgroups refuses this machine if it is cgroup v2 only.
func checkHostCgroups() error {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cgroupRoot, &fs); err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	return checkCgroups(int64(fs.Type))
}

// checkCgroups refuses a machine whose /sys/fs/cgroup is a cgroup v2 mount
// (fsType, statfs's type of it): the nodes' groups are made in v1
// hierarchies, and there would be written into systemd's own slices.
func checkCgroups(fsType int64) error {
	if fsType == cgroup2Magic {
		return fmt.Errorf("%s is cgroup v2 only (unified hierarchy): localkube needs the cgroup v1 hierarchies (boot with systemd.unified_cgroup_hierarchy=0, or run in a container that mounts them)", cgroupRoot)
	}
	return nil
}

// makeCgroup creates group (a path relative to each hierarchy's root, e.g.
// lk123-node-a/system) in every hierarchy, copying cpuset.cpus and
// cpuset.mems down from the root in the cpuset hierarchy.
func makeCgroup(group string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		parts := strings.Split(group, "/")
		for i := range parts {
			p := filepath.Join(cgroupRoot, h, filepath.Join(parts[:i+1]...))
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("cgroup %s: %w", p, err)
			}
			if h == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					b, err := os.ReadFile(filepath.Join(filepath.Dir(p), f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %s: %w", p, f, err)
					}
				}
			}
		}
	}
	return nil
}

// cgroupPIDs lists the processes in group's subtree in every hierarchy.
func cgroupPIDs(group string) []int {
	hs, _ := hierarchies()
	seen := map[int]bool{}
	var pids []int
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(cgroupRoot, h, group), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroup kills every process in group's subtree, waits for them to
// go, then removes its groups deepest first in every hierarchy.
func removeCgroup(group string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := slices.DeleteFunc(cgroupPIDs(group), func(p int) bool { return p == os.Getpid() })
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still running after SIGKILL: %v", group, pids)
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, h := range hs {
		top := filepath.Join(cgroupRoot, h, group)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // children first
		for _, d := range dirs {
			// A group whose last task just died may be busy a moment.
			var err error
			for range 100 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupJoin is a shell prefix that moves the shell into group in every
// hierarchy before it execs the command after it ("$@").
func cgroupJoin(group string) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "echo $$ > %s/%s/%s/cgroup.procs && ", cgroupRoot, h, group)
	}
	b.WriteString(`exec "$@"`)
	return []string{"/bin/sh", "-c", b.String(), "sh"}, nil
}

func addrIn(p netip.Prefix, last byte) string {
	b := p.Addr().As4()
	b[3] = last
	return netip.AddrFrom4(b).String()
}

// The cluster's address plan inside the nodes.
const (
	podCIDR     = "10.244.0.0/16"
	serviceCIDR = "10.96.0.0/16"
	apiPort     = 6443
)

// makeNetwork creates the bridge, every node's namespace, veth, routes and
// cgroup, and the infra cgroup. Each name is recorded before it exists, so
// Down removes a half-made one.
func (c *Cluster) makeNetwork() error {
	c.seq = clusters.Add(1)
	c.Bridge = fmt.Sprintf("%s%db%d", prefix, c.Owner, c.seq)
	c.StewardDir = filepath.Join(c.Dir, "steward")
	for i := range c.Config.Nodes {
		name := "node-" + Zones[i]
		c.Nodes = append(c.Nodes, &Node{
			Name: name, Index: i, Zone: Zones[i],
			Netns:     fmt.Sprintf("%s%dn%d-%s", prefix, c.Owner, c.seq, name),
			Veth:      fmt.Sprintf("%s%dv%d-%d", prefix, c.Owner, c.seq, i+1),
			Cgroup:    fmt.Sprintf("%s%dc%d-%s", prefix, c.Owner, c.seq, name),
			Dir:       filepath.Join(c.Dir, "nodes", name),
			PodSubnet: fmt.Sprintf("10.244.%d.0/24", i+1),
		})
	}
	if err := c.writeState(false); err != nil {
		return err
	}
	if err := makeCgroup(c.infraCgroup()); err != nil {
		return err
	}
	unlock, err := subnet.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	if c.Subnet, err = subnet.Free(); err != nil {
		return err
	}
	c.Gateway = addrIn(c.Subnet, 1)
	if err := ipCmds(
		[]string{"link", "add", c.Bridge, "type", "bridge"},
		[]string{"addr", "add", c.Gateway + "/24", "dev", c.Bridge},
		[]string{"link", "set", c.Bridge, "up"},
	); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		n.Addr = addrIn(c.Subnet, byte(10+n.Index))
	}
	for _, n := range c.Nodes {
		cmds := [][]string{
			{"netns", "add", n.Netns},
			{"link", "add", n.Veth, "type", "veth", "peer", "name", "eth0", "netns", n.Netns},
			{"link", "set", n.Veth, "master", c.Bridge},
			{"link", "set", n.Veth, "up"},
			{"-n", n.Netns, "addr", "add", n.Addr + "/24", "dev", "eth0"},
			{"-n", n.Netns, "link", "set", "eth0", "up"},
			{"-n", n.Netns, "link", "set", "lo", "up"},
			// Connections of the node's own processes to a Service:
			// kube-proxy's OUTPUT rules rewrite them, but only once a
			// route lets them leave.
			{"-n", n.Netns, "route", "add", serviceCIDR, "dev", "eth0"},
		}
		for _, o := range c.Nodes {
			if o != n {
				cmds = append(cmds, []string{"-n", n.Netns, "route", "add", o.PodSubnet, "via", o.Addr})
			}
		}
		if err := ipCmds(cmds...); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if err := makeCgroup(n.Cgroup + "/system"); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return c.writeState(false)
}

func (c *Cluster) infraCgroup() string { return fmt.Sprintf("%s%dc%d-infra", prefix, c.Owner, c.seq) }

// command returns a command that runs argv in group's cgroups, in the
// network namespace netns (none: the root one) and the mount namespace of
// the process mountPID (0: the machine's), logging to logFile.
func (c *Cluster) command(group, netns string, mountPID int, logFile string, argv ...string) (*exec.Cmd, error) {
	join, err := cgroupJoin(group)
	if err != nil {
		return nil, err
	}
	args := join
	if netns != "" || mountPID != 0 {
		args = append(args, "nsenter")
		if netns != "" {
			args = append(args, "--net="+filepath.Join(netnsDir, netns))
		}
		if mountPID != 0 {
			args = append(args, fmt.Sprintf("--mount=/proc/%d/ns/mnt", mountPID))
		}
		args = append(args, "--")
	}
	args = append(args, argv...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if logFile != "" {
		if err := os.MkdirAll(filepath.Dir(logFile), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = f, f
	}
	return cmd, nil
}

// start starts a long-running process (see command) and keeps it for
// Down. done is closed when it exits.
func (c *Cluster) start(group, netns string, mountPID int, logFile string, argv ...string) (cmd *exec.Cmd, done <-chan struct{}, err error) {
	return c.startEnv(nil, group, netns, mountPID, logFile, argv...)
}

// startEnv is start with the environment env (nil: this process's).
func (c *Cluster) startEnv(env []string, group, netns string, mountPID int, logFile string, argv ...string) (cmd *exec.Cmd, done <-chan struct{}, err error) {
	cmd, err = c.command(group, netns, mountPID, logFile, argv...)
	if err != nil {
		return nil, nil, err
	}
	cmd.Env = env
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, nil, errors.New("the cluster is being removed")
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	if f, ok := cmd.Stdout.(*os.File); ok {
		f.Close() // the child has it
	}
	ch := make(chan struct{})
	go func() { _ = cmd.Wait(); close(ch) }()
	c.procs = append(c.procs, cmd)
	return cmd, ch, nil
}

// run runs a short command (see command) to its end; its output is in the
// error.
func (c *Cluster) run(ctx context.Context, group, netns string, mountPID int, argv ...string) ([]byte, error) {
	cmd, err := c.command(group, netns, mountPID, "", argv...)
	if err != nil {
		return nil, err
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = ctx.Err()
	}
	if err != nil {
		return []byte(out.String()), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return []byte(out.String()), nil
}

// Down removes the cluster: every process (killed: the cluster's data is
// not kept, so nothing needs a graceful stop, and kube-apiserver would take
// 61 s to leave on SIGTERM), the cgroups, namespaces, veths and the bridge.
// The directory stays (logs, for a failed run); RemoveDir removes it. Down
// may be called more than once.
func (c *Cluster) Down() error {
	c.mu.Lock()
	c.down = true
	procs := c.procs
	if c.stopProvisioner != nil {
		c.stopProvisioner()
	}
	lb := c.lb
	c.lb = nil
	c.mu.Unlock()
	if lb != nil {
		lb.Close()
	}
	for _, p := range procs {
		if p.Process != nil {
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, removeCgroup(n.Cgroup))
	}
	errs = append(errs, removeCgroup(c.infraCgroup()))
	for _, n := range c.Nodes {
		errs = append(errs, removeNetns(n.Netns), removeLink(n.Veth))
	}
	errs = append(errs, removeLink(c.Bridge))
	if m := mountsUnder(c.Dir); len(m) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s: %s", c.Dir, strings.Join(m, ", ")))
	}
	return errors.Join(errs...)
}

// RemoveDir removes the cluster's directory, once Down succeeded and no
// mount is left under it.
func (c *Cluster) RemoveDir() error { return RemoveDir(c.Dir) }

// RemoveDir removes a cluster's directory, refusing while a mount is under
// it (removing files through a mount would reach outside the directory).
func RemoveDir(dir string) error {
	if m := mountsUnder(dir); len(m) > 0 {
		return fmt.Errorf("not removing %s: mounts under it: %s", dir, strings.Join(m, ", "))
	}
	return os.RemoveAll(dir)
}

// CleanupStale removes what clusters of dead owners left: processes in
// their cgroups and namespaces, the cgroups, namespaces, veths and bridges
// whose name carries a PID no longer alive. It returns the names removed.
func CleanupStale() ([]string, error) {
	return cleanupOwned(func(pid int) bool { return pid != os.Getpid() && !proc.Alive(pid) })
}

// RemoveOwned removes everything named for owner, alive or not (`localkube
// down` of a cluster whose supervisor does not answer).
func RemoveOwned(owner int) ([]string, error) {
	return cleanupOwned(func(pid int) bool { return pid == owner })
}

func cleanupOwned(match func(pid int) bool) ([]string, error) {
	var removed []string
	var errs []error
	owned := func(name string) bool { p := ownerOf(name); return p != 0 && match(p) }
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	groups := map[string]bool{}
	for _, h := range hs {
		ents, _ := os.ReadDir(filepath.Join(cgroupRoot, h))
		for _, e := range ents {
			if e.IsDir() && owned(e.Name()) {
				groups[e.Name()] = true
			}
		}
	}
	for g := range groups {
		removed = append(removed, "cgroup "+g)
		errs = append(errs, removeCgroup(g))
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if owned(e.Name()) {
			removed = append(removed, "netns "+e.Name())
			errs = append(errs, removeNetns(e.Name()))
		}
	}
	ifs, _ := net.Interfaces()
	for _, kind := range []string{"v", "b"} {
		for _, i := range ifs {
			if owned(i.Name) && strings.HasPrefix(strings.TrimLeft(strings.TrimPrefix(i.Name, prefix), "0123456789"), kind) {
				removed = append(removed, "link "+i.Name)
				errs = append(errs, removeLink(i.Name))
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeNetns kills every process left in the namespace, then deletes it.
func removeNetns(ns string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return fmt.Errorf("ip netns pids %s: %v", ns, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in namespace %s: %s", ns, strings.Join(pids, " "))
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ipCmds([]string{"netns", "del", ns})
}

// removeLink deletes an interface of the root namespace, if it exists.
func removeLink(name string) error {
	if name == "" {
		return nil
	}
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	err := ipCmds([]string{"link", "del", name})
	if _, gone := net.InterfaceByName(name); gone != nil {
		return nil
	}
	return err
}

func ipCmds(cmds ...[]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// mountsUnder lists the machine's mount points under dir.
func mountsUnder(dir string) []string {
	if dir == "" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 && (fs[4] == dir || strings.HasPrefix(fs[4], dir+"/")) {
			out = append(out, fs[4])
		}
	}
	return out
}

// poll calls f every 100 ms until it returns nil, ctx ends or timeout
// passes; the error then says what f last said.
func poll(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
