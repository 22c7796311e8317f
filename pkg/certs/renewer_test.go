package certs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/cluster/clustertest"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestEnsureRenewer: the renewal process is started once (a second call
// finds it by its pid file), its pid file names it; one that exits at
// start is reported with its log and leaves no pid file.
func TestEnsureRenewer(t *testing.T) {
	t.Run("exits at start", func(t *testing.T) {
		c := clustertest.MultiHost(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"refused: $*\" >&2\nexit 1\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		started, err := EnsureRenewer(t.Context(), c, exe)
		if started || err == nil || !strings.Contains(err.Error(), "certificate renewal exited at start") || !strings.Contains(err.Error(), "refused: certs renew --watch --dir "+c.Dir) {
			t.Fatalf("EnsureRenewer = %v, %v; want the exit reported with its log", started, err)
		}
		if _, err := os.Stat(filepath.Join(c.Dir, "run", RenewerPIDFile)); !os.IsNotExist(err) {
			t.Errorf("pid file left: %v", err)
		}
	})
	t.Run("started once", func(t *testing.T) {
		c := clustertest.MultiHost(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		started, err := EnsureRenewer(t.Context(), c, exe)
		if !started || err != nil {
			t.Fatalf("EnsureRenewer = %v, %v", started, err)
		}
		pid := RenewerPID(c)
		if pid == 0 {
			t.Fatal("no running renewer found after a start")
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if args := strings.Join(proc.Cmdline(pid), " "); !strings.Contains(args, "certs renew --watch --dir "+c.Dir) {
			t.Errorf("renewer runs %q", args)
		}
		if again, err := EnsureRenewer(t.Context(), c, exe); again || err != nil {
			t.Errorf("second EnsureRenewer = %v, %v; want the running one kept", again, err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("two at once start one", func(t *testing.T) {
		c := clustertest.MultiHost(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make([]bool, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { results[i], errs[i] = EnsureRenewer(t.Context(), c, exe) })
		}
		wg.Wait()
		t.Cleanup(func() { _ = exec.Command("pkill", "-KILL", "-f", exe).Run() }) // every one started, even a stray
		n := 0
		for i := range 2 {
			if errs[i] != nil {
				t.Errorf("EnsureRenewer %d: %v", i, errs[i])
			}
			if results[i] {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d renewers started by two concurrent calls, want 1", n)
		}
		// Every process running the script is the one the pid file names.
		out, _ := exec.Command("pgrep", "-f", exe).Output()
		if pids := strings.Fields(string(out)); len(pids) != 1 || pids[0] != strconv.Itoa(RenewerPID(c)) {
			t.Errorf("renewer processes %v, want only the one in the pid file (%d)", pids, RenewerPID(c))
		}
	})
}

// TestRenewRefusesOperatorCerts: the certificates of an attached cluster,
// even once every member is adopted, are the operator's: Renew refuses
// them (cluster.ErrOperatorCerts) and changes nothing.
func TestRenewRefusesOperatorCerts(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{
		Name:     "kube",
		External: &spec.External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/c.crt", KeyFile: "/etc/etcd/c.key", ClusterID: "feed"},
		Members:  []spec.Member{{Name: "cp-1", ClientURL: "https://127.0.0.1:2379", PeerURL: "https://127.0.0.1:2380"}},
	}}
	for _, adopted := range []bool{false, true} {
		if adopted {
			c.Spec.Members[0].Agent, c.Spec.Members[0].Adopted = "local", &spec.Adopted{}
		}
		if _, err := Renew(t.Context(), c, nil, true, 0); !errors.Is(err, cluster.ErrOperatorCerts) {
			t.Errorf("adopted %v: Renew = %v, want ErrOperatorCerts", adopted, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "run")); !os.IsNotExist(err) {
		t.Errorf("a refused renewal created %s/run: %v", c.Dir, err)
	}
}

// TestHoldRenewer: the first renewal process of a directory holds it and
// records its pid; a second is refused (ErrRenewerRunning) and changes
// nothing; after release the pid file is gone and the directory can be
// held again.
func TestHoldRenewer(t *testing.T) {
	c := clustertest.MultiHost(t, false, true)
	pidFile := c.Dir + "/run/" + RenewerPIDFile
	release, err := HoldRenewer(c)
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(os.Getpid()) + "\n"
	if b, err := os.ReadFile(pidFile); err != nil || string(b) != want {
		t.Fatalf("pid file %q (%v), want %q", b, err, want)
	}
	if fi, err := os.Stat(pidFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("pid file mode: %v %v", fi.Mode().Perm(), err)
	}
	if r2, err := HoldRenewer(c); !errors.Is(err, ErrRenewerRunning) {
		if r2 != nil {
			r2()
		}
		t.Fatalf("second HoldRenewer: %v, want ErrRenewerRunning", err)
	}
	if b, err := os.ReadFile(pidFile); err != nil || string(b) != want {
		t.Errorf("pid file after the refused second: %q (%v)", b, err)
	}
	release()
	if _, err := os.Stat(pidFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pid file after release: %v", err)
	}
	release, err = HoldRenewer(c)
	if err != nil {
		t.Fatalf("HoldRenewer after release: %v", err)
	}
	release()
}
