package harness

// Delayed links between hosts: a DelayProxy (delayproxy.go) placed on the
// path of every TCP connection from one host to an address of another,
// without changing Steward or etcd.
//
// Routing, for a link from host A to TARGET (B's address and a port):
//   - in A's namespace, a nat rule on the output hook (nftables, table
//     ip steward_delay) redirects A's connections to TARGET to
//     127.0.0.1:PORT, where the link's proxy listens (a socket the test
//     process made inside A's namespace);
//   - the proxy dials TARGET from A's namespace with the socket mark
//     delayMark, which the rule skips, so its own connection leaves A
//     directly, from A's address.
//
// B's member thus sees the connection come from A's address, as without the
// proxy: etcd checks a peer certificate's addresses against the address a
// connection comes from, so a proxy on B's side (connections from B's own
// address) would be refused. Only connections A opens to TARGET are
// delayed; a link per direction (B to A's member) delays the other. The
// rules live in the hosts' namespaces only, never the machine's own; the
// link's cleanup closes the proxy and deletes the table.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// delayMark marks the proxies' own connections, which the redirect rules
// let through.
const delayMark = 0x5d7e

// delayTable is the nftables table of the redirect rules in a host's
// namespace.
const delayTable = "steward_delay"

// DelayedLink is one host's connections to one address, through a
// DelayProxy.
type DelayedLink struct {
	// From is the host whose connections are delayed, Target the address
	// (host:port) they go to.
	From   *Host
	Target string
	Proxy  *DelayProxy
}

// DelayLink delays every TCP connection host h opens to target (an
// address of another host, host:port) by d each way, from now until the
// test ends: it starts a DelayProxy in h's namespace and redirects those
// connections to it. It needs nft (Debian's nftables package); without it
// the test fails saying so.
func (h *Host) DelayLink(tb testing.TB, target string, d time.Duration) *DelayedLink {
	tb.Helper()
	thost, tport, err := net.SplitHostPort(target)
	if err != nil || net.ParseIP(thost).To4() == nil {
		tb.Fatalf("delay link from host %s: target %q is not an IPv4 address and port", h.Name, target)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		tb.Fatalf("delayed links need nft (Debian: apt-get install nftables; hack/install-nftables.sh): %v", err)
	}
	var ln net.Listener
	if err := h.InNetns(func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		tb.Fatalf("delay link from host %s to %s: listen: %v", h.Name, target, err)
	}
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, delayMark)
		}); err != nil {
			return err
		}
		return serr
	}}
	p := NewDelayProxy(ln, d, func(ctx context.Context) (c net.Conn, err error) {
		err = h.InNetns(func() (err error) {
			c, err = dialer.DialContext(ctx, "tcp4", target)
			return err
		})
		return c, err
	})
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("close the delay proxy of host %s to %s: %v", h.Name, target, err)
		}
	})
	h.mu.Lock()
	first := !h.delayRules
	h.delayRules = true
	h.mu.Unlock()
	if first {
		tb.Cleanup(func() { h.removeDelayRules(tb) })
	}
	port := ln.Addr().(*net.TCPAddr).Port
	rules := fmt.Sprintf(`add table ip %[1]s
add chain ip %[1]s output { type nat hook output priority -100; policy accept; }
add rule ip %[1]s output ip daddr %[2]s tcp dport %[3]s meta mark != %#[4]x redirect to :%[5]d
`, delayTable, thost, tport, delayMark, port)
	if err := h.nft(rules); err != nil {
		tb.Fatalf("delay link from host %s to %s: %v", h.Name, target, err)
	}
	tb.Logf("host %s: connections to %s delayed %s each way (proxy on 127.0.0.1:%d in its namespace)", h.Name, target, d, port)
	return &DelayedLink{From: h, Target: target, Proxy: p}
}

// DelayRules lists the host's redirect rules (`nft list table`), empty
// when it has none.
func (h *Host) DelayRules() (string, error) {
	out, err := h.Command(context.Background(), "nft", "list", "table", "ip", delayTable).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return "", nil
		}
		return "", fmt.Errorf("nft list table ip %s in %s: %v: %s", delayTable, h.Netns, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// removeDelayRules deletes the host's table of redirect rules, if its
// namespace is still there.
func (h *Host) removeDelayRules(tb testing.TB) {
	if _, err := os.Stat(filepath.Join(netnsDir, h.Netns)); err != nil {
		return
	}
	if err := h.nft("delete table ip " + delayTable + "\n"); err != nil {
		tb.Errorf("remove the delay rules of host %s: %v", h.Name, err)
		return
	}
	h.mu.Lock()
	h.delayRules = false
	h.mu.Unlock()
}

// nft runs `nft -f -` with rules in the host's namespace.
func (h *Host) nft(rules string) error {
	cmd := h.Command(context.Background(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f - in %s: %v: %s\n%s", h.Netns, err, strings.TrimSpace(string(out)), rules)
	}
	return nil
}

// InNetns runs f on an OS thread that has entered the host's namespace:
// the sockets f creates (a listener, a dialled connection) belong to that
// namespace for their whole life, whichever goroutine uses them later. The
// thread goes back to the test process's namespace afterwards; if it
// cannot, it stays locked to its goroutine and dies with it, so no other
// goroutine ever runs in the namespace.
func (h *Host) InNetns(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(filepath.Join(netnsDir, h.Netns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open namespace %s: %w", h.Netns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", h.Netns, err)
			return
		}
		err = f()
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr == nil {
			runtime.UnlockOSThread()
		} // else: the thread ends with this goroutine
		errc <- err
	}()
	return <-errc
}

// MeasureRTT opens a connection from host h to target (in h's namespace,
// as h's processes do, so through a DelayLink if there is one) while an
// echo server listens on target in the namespace of to (the host whose
// address target is), and returns the round trip times of n one-byte
// exchanges, sorted. Nothing else may listen on target meanwhile.
func (h *Host) MeasureRTT(tb testing.TB, to *Host, target string, n int) ([]time.Duration, error) {
	tb.Helper()
	var ln net.Listener
	if err := to.InNetns(func() (err error) { ln, err = net.Listen("tcp4", target); return err }); err != nil {
		return nil, fmt.Errorf("echo server on host %s at %s: %w", to.Name, target, err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	defer func() { ln.Close(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c net.Conn
	if err := h.InNetns(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp4", target)
		return err
	}); err != nil {
		return nil, fmt.Errorf("dial %s from host %s: %w", target, h.Name, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	var rtts []time.Duration
	b := []byte{'x'}
	for range n {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			return nil, err
		}
		if _, err := c.Read(b); err != nil {
			return nil, fmt.Errorf("read the echo from %s on host %s: %w", target, h.Name, err)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	if len(rtts) == 0 {
		return nil, errors.New("no exchange")
	}
	return rtts, nil
}
