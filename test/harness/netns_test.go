package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/proc"
)

// helperEnv tells the test binary, run in a host's namespace, to be a
// helper process (TestNetnsHelper) instead of running tests: "listen
// ADDR", "dial ADDR" or "loopback".
const helperEnv = "STEWARD_NETNS_HELPER"

// TestNetnsHelper is not a test: it is the test binary's helper process,
// run inside a host's namespace by helper(). Without helperEnv it returns
// at once.
func TestNetnsHelper(t *testing.T) {
	mode, addr, _ := strings.Cut(os.Getenv(helperEnv), " ")
	if mode == "" {
		return
	}
	var err error
	switch mode {
	case "listen": // echo every connection's lines back, until killed
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			for {
				c, err := l.Accept()
				if err != nil {
					break
				}
				go func() { _, _ = io.Copy(c, c); c.Close() }()
			}
		}
	case "dial":
		err = echo(addr)
	case "loopback": // listen on 127.0.0.1 and talk to itself
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
			go func() {
				if c, err := l.Accept(); err == nil {
					_, _ = io.Copy(c, c)
					c.Close()
				}
			}()
			err = echo(l.Addr().String())
		}
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helper returns the test binary as a helper process in h's namespace.
func helper(t *testing.T, h *Host, mode string) *exec.Cmd {
	cmd := h.Command(t.Context(), os.Args[0], "-test.run=^TestNetnsHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// dialFrom runs a helper in h that dials addr and exchanges a line.
func dialFrom(t *testing.T, h *Host, addr string) error {
	if out, err := helper(t, h, "dial "+addr).CombinedOutput(); err != nil {
		return fmt.Errorf("dial %s from host %s: %v: %s", addr, h.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// echo dials addr, sends a line and reads it back, within 1 s.
func echo(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	if line != "ping\n" {
		return fmt.Errorf("%s echoed %q", addr, line)
	}
	return nil
}

// unreachable is a condition that holds once err() fails.
func unreachable(what string, try func() error) func() error {
	return func() error {
		if try() == nil {
			return errors.New(what + " still reachable")
		}
		return nil
	}
}

// leftovers lists which of names still exist as namespaces or links.
func leftovers(names []string) ([]string, error) {
	ns, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %v: %s", err, ns)
	}
	links, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip -o link: %v: %s", err, links)
	}
	var left []string
	for _, n := range names {
		// Whole words: stw1v1 is not stw1v12.
		for _, f := range strings.FieldsFunc(string(ns)+string(links), func(r rune) bool { return strings.ContainsRune(" :@\n", r) }) {
			if f == n {
				left = append(left, n)
				break
			}
		}
	}
	return left, nil
}

// TestNetworkHosts: three hosts reach each other, the root namespace's
// bridge address and their own loopback; a cut host (either way) is
// unreachable from the root namespace and the other hosts until healed; a
// delay slows its round trips; cleanup leaves no namespace, link or
// process behind.
func TestNetworkHosts(t *testing.T) {
	var names []string
	var listener *Process
	t.Run("network", func(t *testing.T) {
		n := NewNetwork(t)
		a, b, c := n.AddHost(t, "a"), n.AddHost(t, "b"), n.AddHost(t, "c")
		names = []string{n.Bridge}
		for _, h := range []*Host{a, b, c} {
			names = append(names, h.Netns, h.Link)
		}
		aAddr := net.JoinHostPort(a.Addr, "7000")
		listener = a.Start(t, helper(t, a, "listen "+aAddr))

		// The test process, in the root namespace, listens on the bridge.
		l, err := net.Listen("tcp", net.JoinHostPort(n.Addr, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(c, c); c.Close() }()
			}
		}()
		root := l.Addr().String()

		fromRoot := func() error { return echo(aAddr) }
		fromB := func() error { return dialFrom(t, b, aAddr) }
		Eventually(t, 10*time.Second, 50*time.Millisecond, "host a's listener, from the root namespace", fromRoot)
		if err := fromB(); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Host{a, b, c} {
			if err := dialFrom(t, h, root); err != nil {
				t.Fatalf("the root namespace's bridge address: %v", err)
			}
			if out, err := helper(t, h, "loopback").CombinedOutput(); err != nil {
				t.Fatalf("loopback in host %s: %v: %s", h.Name, err, out)
			}
		}

		for _, cut := range []struct {
			name    string
			cut     func(testing.TB)
			carrier bool // host a's eth0 keeps its carrier
		}{{"link down", a.Cut, false}, {"dropped frames", a.CutSilently, true}} {
			if !t.Run("cut by "+cut.name, func(t *testing.T) {
				cut.cut(t)
				Eventually(t, 10*time.Second, 50*time.Millisecond, "host a cut off from the root namespace", unreachable("host a from the root namespace", fromRoot))
				if fromB() == nil {
					t.Fatal("host b still reaches host a")
				}
				if err := dialFrom(t, a, root); err == nil {
					t.Fatal("host a still reaches the root namespace")
				}
				if err := dialFrom(t, b, root); err != nil {
					t.Fatalf("host a's cut cut host b off: %v", err)
				}
				out, err := exec.Command("ip", "-n", a.Netns, "link", "show", "eth0").CombinedOutput()
				if err != nil {
					t.Fatalf("ip link show: %v: %s", err, out)
				}
				if carrier := !strings.Contains(string(out), "NO-CARRIER"); carrier != cut.carrier {
					t.Fatalf("host a's eth0 has carrier %v, want %v: %s", carrier, cut.carrier, out)
				}
				a.Heal(t)
				Eventually(t, 20*time.Second, 100*time.Millisecond, "host a back, from the root namespace", fromRoot)
				Eventually(t, 20*time.Second, 100*time.Millisecond, "host a back, from host b", fromB)
			}) {
				return
			}
		}

		// The project's machines have no netem: Delay must say so. Where
		// the kernel has it, the delay must show.
		t.Run("delay or no netem", func(t *testing.T) {
			const d = 50 * time.Millisecond
			ftb := &fatalTB{TB: t}
			a.Delay(ftb, d)
			// CheckNetem, which benchmarks ask before Delay, agrees.
			if cerr := CheckNetem(); (cerr == nil) != (ftb.msg == "") {
				t.Fatalf("CheckNetem says %v, Delay says %q", cerr, ftb.msg)
			}
			if ftb.msg != "" {
				if !strings.Contains(ftb.msg, "CONFIG_NET_SCH_NETEM is not set") {
					t.Fatal(ftb.msg)
				}
				t.Logf("Delay failed as it must without netem: %s", ftb.msg)
				if err := echo(aAddr); err != nil {
					t.Fatalf("host a after a failed Delay: %v", err)
				}
				return
			}
			// Connect and echo: two round trips, each at least 2d.
			start := time.Now()
			if err := echo(aAddr); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < 4*d {
				t.Fatalf("connect and echo with a %s delay took %s, want at least %s", d, took, 4*d)
			}
			a.Delay(t, 0)
			Eventually(t, 10*time.Second, 50*time.Millisecond, "a fast round trip without the delay", func() error {
				start := time.Now()
				if err := echo(aAddr); err != nil {
					return err
				}
				if took := time.Since(start); took >= 2*d {
					return fmt.Errorf("connect and echo took %s", took)
				}
				return nil
			})
		})
	})

	if left, err := leftovers(names); err != nil || len(left) > 0 {
		t.Fatalf("after the network's cleanup: left %v (%v)", left, err)
	}
	if listener != nil && proc.Alive(listener.Cmd.Process.Pid) {
		t.Fatalf("host a's listener (pid %d) survived the cleanup", listener.Cmd.Process.Pid)
	}
}

// TestNetworkCleanupStale: the leftovers of a test process that died
// before its cleanup (a namespace with a process in it, a veth, a bridge)
// are removed, its process killed; a live process's network is not.
func TestNetworkCleanupStale(t *testing.T) {
	live := NewNetwork(t)
	h := live.AddHost(t, "live")

	// A PID that is no longer alive.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	br := fmt.Sprintf("stw%db1", pid)
	veth := fmt.Sprintf("stw%dv2", pid)
	ns := fmt.Sprintf("stw%dn2-x", pid)
	names := []string{br, veth, ns}
	t.Cleanup(func() { // should CleanupStale fail
		_ = removeLink(veth)
		_ = removeLink(br)
		_ = removeNetns(ns)
	})
	if err := ipCmds(
		[]string{"link", "add", br, "type", "bridge"},
		[]string{"netns", "add", ns},
		[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		[]string{"link", "set", veth, "master", br},
	); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("ip", "netns", "exec", ns, "sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-exited })
	if left, err := leftovers(names); err != nil || len(left) != len(names) {
		t.Fatalf("made %v, found %v (%v)", names, left, err)
	}

	CleanupStale(t)
	if left, err := leftovers(names); err != nil || len(left) > 0 {
		t.Fatalf("after CleanupStale: left %v (%v)", left, err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the stale namespace survived")
	}
	if left, err := leftovers([]string{live.Bridge, h.Netns, h.Link}); err != nil || len(left) != 3 {
		t.Fatalf("CleanupStale removed a live network: %v left (%v)", left, err)
	}
}
