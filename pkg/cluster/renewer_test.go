package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// multiHostCluster is a coordinator's cluster: members on hosts h1..h3
// (plus one on this machine's agent when local), the CA key in its
// certificate directory when caKey.
func multiHostCluster(t *testing.T, local, caKey bool) *Cluster {
	t.Helper()
	s := &spec.Cluster{Agents: []spec.Agent{{Name: spec.LocalAgent, Address: "unix:///run/agent.sock"}}}
	for _, h := range []string{"h1", "h2", "h3"} {
		s.Agents = append(s.Agents, spec.Agent{Name: h, Host: "10.0.0.1" + h[1:], Port: 2378})
		s.Members = append(s.Members, spec.Member{Name: "etcd-" + h, Agent: h})
	}
	if local {
		s.Members = append(s.Members, spec.Member{Name: "etcd-local", Agent: spec.LocalAgent})
	}
	c := &Cluster{Dir: t.TempDir(), Spec: s}
	if err := os.MkdirAll(c.CertDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if caKey {
		if err := os.WriteFile(filepath.Join(c.CertDir(), pki.CAKey), []byte("key"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestNeedsRenewer: only the coordinator of a multi-host cluster (the CA
// key here, TLS on) with no member on this machine's agent needs a
// renewal process of its own.
func TestNeedsRenewer(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		local, caKey, tlsOff bool
		singleHost           bool
		want                 bool
	}{
		{name: "coordinator without a local agent", caKey: true, want: true},
		{name: "coordinator with a local member (its agent's loop renews)", local: true, caKey: true},
		{name: "no CA key (a joined host's directory)"},
		{name: "TLS off", caKey: true, tlsOff: true},
		{name: "single host", caKey: true, singleHost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := multiHostCluster(t, tc.local, tc.caKey)
			c.Spec.TLS.Disabled = tc.tlsOff
			if tc.singleHost {
				c.Spec.Agents = c.Spec.Agents[:1]
			}
			if got := c.NeedsRenewer(); got != tc.want {
				t.Errorf("NeedsRenewer() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEnsureRenewer: the renewal process is started once (a second call
// finds it by its pid file), its pid file names it; one that exits at
// start is reported with its log and leaves no pid file.
func TestEnsureRenewer(t *testing.T) {
	t.Run("exits at start", func(t *testing.T) {
		c := multiHostCluster(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"refused: $*\" >&2\nexit 1\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		started, err := c.EnsureRenewer(t.Context(), exe)
		if started || err == nil || !strings.Contains(err.Error(), "certificate renewal exited at start") || !strings.Contains(err.Error(), "refused: certs renew --watch --dir "+c.Dir) {
			t.Fatalf("EnsureRenewer = %v, %v; want the exit reported with its log", started, err)
		}
		if _, err := os.Stat(filepath.Join(c.Dir, "run", RenewerPIDFile)); !os.IsNotExist(err) {
			t.Errorf("pid file left: %v", err)
		}
	})
	t.Run("started once", func(t *testing.T) {
		c := multiHostCluster(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		started, err := c.EnsureRenewer(t.Context(), exe)
		if !started || err != nil {
			t.Fatalf("EnsureRenewer = %v, %v", started, err)
		}
		pid := c.RenewerPID()
		if pid == 0 {
			t.Fatal("no running renewer found after a start")
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if args := strings.Join(proc.Cmdline(pid), " "); !strings.Contains(args, "certs renew --watch --dir "+c.Dir) {
			t.Errorf("renewer runs %q", args)
		}
		if again, err := c.EnsureRenewer(t.Context(), exe); again || err != nil {
			t.Errorf("second EnsureRenewer = %v, %v; want the running one kept", again, err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("two at once start one", func(t *testing.T) {
		c := multiHostCluster(t, false, true)
		exe := filepath.Join(t.TempDir(), "steward")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o700); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		results := make([]bool, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { results[i], errs[i] = c.EnsureRenewer(t.Context(), exe) })
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
		if pids := strings.Fields(string(out)); len(pids) != 1 || pids[0] != strconv.Itoa(c.RenewerPID()) {
			t.Errorf("renewer processes %v, want only the one in the pid file (%d)", pids, c.RenewerPID())
		}
	})
}
