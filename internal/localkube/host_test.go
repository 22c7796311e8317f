package localkube

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOwnerOf(t *testing.T) {
	for name, want := range map[string]int{
		"lk123b1": 123, "lk123v1-2": 123, "lk123n1-node-a": 123, "lk123c1-node-a": 123, "lk123c2-infra": 123,
		"stw123b1": 0, "lk": 0, "lkb": 0, "lk12x": 0, "eth0": 0, "lk123b": 0, "lk123-node-a": 0,
	} {
		if got := ownerOf(name); got != want {
			t.Errorf("ownerOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestCheckRefuses: a configuration Up cannot run is refused before
// anything is made, each problem named.
func TestCheckRefuses(t *testing.T) {
	err := Config{Dir: "/var/lib/localkube", Nodes: 2, Version: "v1.36.3", KubeBin: t.TempDir()}.Check()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"nodes: 2: a local cluster has 1 or 3 nodes",
		"directory /var/lib/localkube is under /var, which the nodes overlay",
		"Kubernetes v1.36.3 is not built",
		"no image to import", "no CoreDNS image for the cluster DNS",
		"steward binary",
		"versitygw binary",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: lacks %q", err, want)
		}
	}
}

// TestCgroupMounts: only cgroup mounts directly under /sys/fs/cgroup are
// hierarchies; a plain directory, a mount deeper down or one elsewhere is
// not.
func TestCgroupMounts(t *testing.T) {
	mi := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/scratch rw,relatime - tmpfs tmpfs rw
43 40 0:37 /x /sys/fs/cgroup/systemd/x rw,relatime - cgroup cgroup rw,name=systemd
44 23 0:40 / /mnt/cg rw,relatime - cgroup cgroup rw,memory
`
	got := cgroupMounts(mi)
	if want := []string{"cpu,cpuacct", "systemd", "unified"}; !slices.Equal(got, want) {
		t.Errorf("cgroupMounts = %q, want %q", got, want)
	}
	pure := "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	if got := cgroupMounts(pure); len(got) != 0 {
		t.Errorf("pure v2: %q", got)
	}
}

// TestCheckCgroupsRefusesV2: a cgroup v2 only machine is refused with one
// message; a v1 or hybrid one (tmpfs at /sys/fs/cgroup) is not.
func TestCheckCgroupsRefusesV2(t *testing.T) {
	err := checkCgroups(0x63677270)
	if err == nil || !strings.Contains(err.Error(), "cgroup v2 only") {
		t.Errorf("pure v2: %v", err)
	}
	if err := checkCgroups(0x01021994); err != nil { // TMPFS_MAGIC
		t.Errorf("tmpfs: %v", err)
	}
}

// TestCheckClusterDir: Up clears only a new or empty directory, or one
// holding a cluster; any other is refused and left as it is.
func TestCheckClusterDir(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files ...string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, d := range []string{filepath.Join(root, "new"), mk("empty"), mk("log", "localkube.log"), mk("cluster", "cluster.json", "kubeconfig")} {
		if err := checkClusterDir(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	home := mk("home", "kubeconfig", "notes.txt")
	err := clearDir(home)
	if err == nil || !strings.Contains(err.Error(), "holds no cluster (no cluster.json)") {
		t.Errorf("a directory of other files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "kubeconfig")); err != nil {
		t.Errorf("refused, yet changed: %v", err)
	}
}
