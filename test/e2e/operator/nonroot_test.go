package operator_test

// Least privilege as the node sees it: the users, capabilities and seccomp
// mode of the running processes of a pod (/proc/PID/status of the
// processes of its cgroup), and the owners of the files on a member's
// volume (the local PersistentVolume's directory on this machine).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// procStatus is what /proc/PID/status says of one process.
type procStatus struct {
	pid                             int
	name, uid, gid, capEff, seccomp string
	noNewPrivs                      string
}

func readProcStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, err
	}
	p := procStatus{pid: pid}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Name":
			p.name = v
		case "Uid":
			p.uid = v // real, effective, saved, file system
		case "Gid":
			p.gid = v
		case "CapEff":
			p.capEff = v
		case "NoNewPrivs":
			p.noNewPrivs = v
		case "Seccomp":
			p.seccomp = v
		}
	}
	return p, nil
}

// requireNonRoot checks every steward and etcd process of each running pod
// of namespace ns matching selector, as this machine sees them: real,
// effective, saved and file-system UID and GID are operator.MemberUID and
// MemberGID (never 0), no effective capability, no_new_privs set, under a
// seccomp filter. Each pod must show at least min such processes (a member
// pod: the agent and its etcd), and its init container "prepare" must have
// run to completion.
func requireNonRoot(t *testing.T, cs *kubernetes.Clientset, ns, selector string, min int) {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no pod of %s in %s", selector, ns)
	}
	want := fmt.Sprintf("%d %d %d %d", operator.MemberUID, operator.MemberUID, operator.MemberUID, operator.MemberUID)
	wantG := fmt.Sprintf("%d %d %d %d", operator.MemberGID, operator.MemberGID, operator.MemberGID, operator.MemberGID)
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		prepared := false
		for _, s := range p.Status.InitContainerStatuses {
			prepared = prepared || s.Name == "prepare" && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0
		}
		if !prepared {
			t.Errorf("pod %s/%s: init container prepare did not complete: %+v", ns, p.Name, p.Status.InitContainerStatuses)
		}
		pids, err := operatorfixture.PodProcesses(p.UID, "")
		if err != nil {
			t.Errorf("pod %s/%s: %v", ns, p.Name, err)
			continue
		}
		seen := 0
		for _, pid := range pids {
			st, err := readProcStatus(pid)
			if errors.Is(err, fs.ErrNotExist) || err == nil && st.name != "steward" && st.name != "etcd" {
				continue // gone, or the sandbox's pause
			}
			if err != nil {
				t.Errorf("pod %s/%s: %v", ns, p.Name, err)
				continue
			}
			seen++
			if st.uid != want || st.gid != wantG || st.capEff != "0000000000000000" || st.noNewPrivs != "1" || st.seccomp != "2" {
				t.Errorf("pod %s/%s: process %d (%s) runs with Uid %q Gid %q CapEff %s NoNewPrivs %s Seccomp %s; want Uid %q Gid %q, no capability, no_new_privs, a seccomp filter",
					ns, p.Name, pid, st.name, st.uid, st.gid, st.capEff, st.noNewPrivs, st.seccomp, want, wantG)
			}
		}
		if seen < min {
			t.Errorf("pod %s/%s: %d steward and etcd processes seen, want at least %d", ns, p.Name, seen, min)
		}
		t.Logf("pod %s/%s: %d steward and etcd processes checked", ns, p.Name, seen)
	}
}

// volumeDir is the directory on this machine of the local volume bound to
// claim ns/name (internal/localkube's provisioner: NODE.Dir/volumes/pvc-UID).
func volumeDir(t *testing.T, cs *kubernetes.Clientset, ns, claim string) string {
	t.Helper()
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(t.Context(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil || pv.Spec.Local.Path == "" {
		t.Fatalf("volume %s of claim %s is not a local volume", pv.Name, claim)
	}
	return pv.Spec.Local.Path
}

// chownTree makes every entry of dir owned by uid:gid (symbolic links
// themselves), as a pod running as that user would have left it, and
// returns how many entries it changed.
func chownTree(t *testing.T, dir string, uid, gid int) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// owners counts the entries of dir by owner "UID:GID" (entries removed
// while it walks are skipped: the member runs).
func owners(t *testing.T, dir string) map[string]int {
	t.Helper()
	got := map[string]int{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		got[fmt.Sprintf("%d:%d", st.Uid, st.Gid)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
