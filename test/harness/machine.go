package harness

// MachineState: what a local Kubernetes must leave as it found it (issue
// 28): the root namespace's sysctls, iptables rules, network links and
// namespaces, the machine's mounts and its cgroups (the groups at the top
// of each hierarchy). Compare two snapshots with DiffMachine.

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// volatileSysctls change by themselves (counters, random values, the
// kernel's own bookkeeping): not compared.
var volatileSysctls = regexp.MustCompile(`^(kernel/random/|kernel/ns_last_pid|kernel/pty/nr|kernel/tainted|fs/dentry-state|fs/inode-|fs/file-nr|fs/quota/|fs/binfmt_misc|net/netfilter/nf_conntrack_count|vm/stat_refresh|vm/drop_caches|vm/compact_memory|kernel/sched_domain|kernel/usermodehelper|net/ipv4/tcp_fastopen_key|net/ipv4/route/flush|net/ipv6/route/flush|fs/xfs|kernel/perf_event_max|dev/)`)

// othersNames are names other test processes of the project create and
// remove while a test runs (the hosts harness: stw<PID>...; test/e2e/kube's
// containerd: its cgroup steward-images-PID and the mounts under its
// directory TMPDIR/ctrd-N): their comings and goings are not this test's.
var othersNames = regexp.MustCompile(`stw[0-9]+[bvn]|steward-images-[0-9]+|/ctrd-[0-9]+(/|$)`)

// MachineState snapshots the machine: one "kind: item" line each.
func MachineState() map[string]bool {
	s := map[string]bool{}
	add := func(kind, item string) {
		if !othersNames.MatchString(item) {
			s[kind+": "+item] = true
		}
	}
	_ = filepath.WalkDir("/proc/sys", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(p, "/proc/sys/")
		if volatileSysctls.MatchString(rel) || strings.HasPrefix(rel, "net/ipv4/conf/") && othersNames.MatchString(rel) || strings.HasPrefix(rel, "net/ipv6/conf/") || strings.HasPrefix(rel, "net/ipv4/neigh/") || strings.HasPrefix(rel, "net/ipv6/neigh/") {
			return nil
		}
		if strings.HasPrefix(rel, "net/ipv4/conf/") && !strings.HasPrefix(rel, "net/ipv4/conf/all/") && !strings.HasPrefix(rel, "net/ipv4/conf/default/") {
			return nil // per-interface: links are compared below
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		add("sysctl", rel+" = "+strings.Join(strings.Fields(string(b)), " "))
		return nil
	})
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if out, err := exec.Command(tool).Output(); err == nil {
			for _, l := range strings.Split(string(out), "\n") {
				if l == "" || strings.HasPrefix(l, "#") {
					continue
				}
				if strings.HasPrefix(l, ":") { // chain: policy [packets:bytes]
					l = strings.Join(strings.Fields(l)[:2], " ")
				}
				add(tool, l)
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				add("link", strings.TrimSuffix(f[1], ":"))
			}
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			add("netns", e.Name())
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) > 4 {
				add("mount", fs[4])
			}
		}
		f.Close()
	}
	if hs, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, h := range hs {
			ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h.Name()))
			for _, e := range ents {
				if e.IsDir() {
					add("cgroup", h.Name()+"/"+e.Name())
				}
			}
		}
	}
	return s
}

// DiffMachine lists what before has and after has not ("- ...") and the
// reverse ("+ ..."), sorted.
func DiffMachine(before, after map[string]bool) []string {
	var d []string
	for k := range before {
		if !after[k] {
			d = append(d, "- "+k)
		}
	}
	for k := range after {
		if !before[k] {
			d = append(d, "+ "+k)
		}
	}
	sort.Strings(d)
	return d
}

// SplitSysctls splits d, DiffMachine(before, after), into changes and the
// sysctls that appeared or disappeared: a key only one snapshot has (a
// kernel module loaded meanwhile, e.g. nf_conntrack registering
// net/netfilter/nf_conntrack_*) is no value changed.
func SplitSysctls(before, after map[string]bool, d []string) (changes, appeared []string) {
	keys := func(s map[string]bool) map[string]bool {
		k := map[string]bool{}
		for item := range s {
			if rest, ok := strings.CutPrefix(item, "sysctl: "); ok {
				name, _, _ := strings.Cut(rest, " = ")
				k[name] = true
			}
		}
		return k
	}
	kb, ka := keys(before), keys(after)
	for _, l := range d {
		if rest, ok := strings.CutPrefix(l[min(2, len(l)):], "sysctl: "); ok {
			name, _, _ := strings.Cut(rest, " = ")
			if !kb[name] || !ka[name] {
				appeared = append(appeared, l)
				continue
			}
		}
		changes = append(changes, l)
	}
	return changes, appeared
}

// FormatDiff is a diff for an error message.
func FormatDiff(d []string) string {
	return fmt.Sprintf("%d difference(s):\n  %s", len(d), strings.Join(d, "\n  "))
}
