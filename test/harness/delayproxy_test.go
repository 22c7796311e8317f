package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxied starts a TCP server on loopback (serve runs for each
// connection), a DelayProxy with delay d in front of it, and returns the
// proxy; the test's cleanup closes both.
func proxied(t *testing.T, d time.Duration, serve func(net.Conn)) *DelayProxy {
	t.Helper()
	srv, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewDelayProxy(ln, d, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp4", srv.Addr().String())
	})
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
		srv.Close()
		wg.Wait()
	})
	return p
}

func dialProxy(t *testing.T, p *DelayProxy) *net.TCPConn {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp4", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

func echoConn(c net.Conn) { _, _ = io.Copy(c, c) }

// pingPong returns the sorted round trip times of n one-byte exchanges.
func pingPong(t *testing.T, c net.Conn, n int) []time.Duration {
	t.Helper()
	var rtts []time.Duration
	b := []byte{'x'}
	for range n {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts
}

// TestDelayProxyDelay: a round trip through the proxy takes 2D (D each
// way), never less, and not much more.
func TestDelayProxyDelay(t *testing.T) {
	const d = 20 * time.Millisecond
	p := proxied(t, d, echoConn)
	c := dialProxy(t, p)
	rtts := pingPong(t, c, 15)
	if rtts[0] < 2*d {
		t.Errorf("fastest round trip %s: under 2 x %s, the delay was not applied", rtts[0], d)
	}
	// Generous: two cores shared with other tests' etcd clusters.
	if med := rtts[len(rtts)/2]; med > 2*d+20*time.Millisecond {
		t.Errorf("median round trip %s: far above 2 x %s", med, d)
	}
	t.Logf("round trips through a %s proxy: min %s, median %s, max %s", d, rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
	// The proxy counts a chunk after writing it: poll.
	if err := Poll(10*time.Second, 10*time.Millisecond, func() error {
		if s := p.Stats(); s.Conns != 1 || s.Bytes != 30 || s.QueueFull != 0 {
			return fmt.Errorf("stats %+v, want 1 connection, 30 bytes, no full queue", s)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestDelayProxyOrderBothWays: megabytes both ways at once, every byte in
// order on each side, with the queue filling up (the bound) and no byte
// lost.
func TestDelayProxyOrderBothWays(t *testing.T) {
	const size = 24 << 20 // above the 8 MiB queue
	pattern := func(seed byte) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*7) + seed + byte(i>>16)
		}
		return b
	}
	up, down := pattern(1), pattern(2)
	serverGot := make(chan []byte, 1)
	p := proxied(t, 2*time.Millisecond, func(c net.Conn) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = c.Write(down); c.(*net.TCPConn).CloseWrite() }()
		// The server reads slowly at first, so the client's direction
		// backs up in the proxy.
		time.Sleep(300 * time.Millisecond)
		b, _ := io.ReadAll(c)
		serverGot <- b
		wg.Wait()
	})
	c := dialProxy(t, p)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(up)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, down) {
		t.Errorf("client got %d bytes, want the server's %d in order", len(got), len(down))
	}
	if sg := <-serverGot; !bytes.Equal(sg, up) {
		t.Errorf("server got %d bytes, want the client's %d in order", len(sg), len(up))
	}
	s := p.Stats()
	if s.Bytes != 2*size {
		t.Errorf("proxy wrote %d bytes, want %d", s.Bytes, 2*size)
	}
	t.Logf("stats: %+v", s)
}

// TestDelayProxyClose: a half-close is passed on after the bytes before
// it (and not before their delay), the other way keeps working, and the
// server's close reaches the client; a reset server aborts the client's
// connection.
func TestDelayProxyClose(t *testing.T) {
	const d = 30 * time.Millisecond
	eofAt := make(chan time.Time, 1)
	p := proxied(t, d, func(c net.Conn) {
		b, err := io.ReadAll(c) // to the client's half-close
		eofAt <- time.Now()
		if err != nil || string(b) != "hello" {
			_, _ = c.Write([]byte("bad: " + string(b)))
			return
		}
		_, _ = c.Write([]byte("bye"))
	})
	c := dialProxy(t, p)
	sent := time.Now()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // "bye", then the server's close as EOF
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "bye" {
		t.Fatalf("client got %q, want bye then EOF", got)
	}
	if e := (<-eofAt).Sub(sent); e < d {
		t.Errorf("server saw the half-close %s after it was sent, before the %s delay", e, d)
	}
	if e := time.Since(sent); e < 2*d {
		t.Errorf("reply and close in %s, under 2 x %s", e, d)
	}

	// A server that resets the connection: the client's end closes too.
	p2 := proxied(t, d, func(c net.Conn) {
		_ = c.(*net.TCPConn).SetLinger(0)
	})
	c2 := dialProxy(t, p2)
	if _, err := io.ReadAll(c2); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("after the server's reset: %v", err)
	}
}

// TestDelayProxyCleanup: Close with connections open and bytes held ends
// every connection on both sides and every goroutine of the proxy.
func TestDelayProxyCleanup(t *testing.T) {
	before := runtime.NumGoroutine()
	serverEnded := make(chan struct{}, 4)
	p := proxied(t, time.Second, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
		serverEnded <- struct{}{}
	})
	var cs []*net.TCPConn
	for range 3 {
		c := dialProxy(t, p)
		if _, err := c.Write([]byte("held a second in the proxy")); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if err := Poll(10*time.Second, 10*time.Millisecond, func() error {
		if n := p.Stats().Conns; n != 3 {
			return errors.New("connections through the proxy: " + strconv.Itoa(int(n)))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Close took %s: it waited for held bytes", took)
	}
	for _, c := range cs {
		if _, err := io.ReadAll(c); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("client connection after Close: %v", err)
		}
	}
	for range cs {
		select {
		case <-serverEnded:
		case <-time.After(10 * time.Second):
			t.Fatal("a server connection was not closed by the proxy's Close")
		}
	}
	if _, err := net.DialTimeout("tcp4", p.Addr().String(), time.Second); err == nil {
		t.Error("the proxy still accepts after Close")
	}
	// The proxy's goroutines are gone (the servers' end with the test).
	if err := Poll(10*time.Second, 10*time.Millisecond, func() error {
		if n := runtime.NumGoroutine(); n > before+2 { // the test server's accept loop and wait
			return errors.New(strconv.Itoa(n) + " goroutines, " + strconv.Itoa(before) + " before")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestDelayLink: a link from one namespace host to another's address is
// delayed both ways through the proxy (the way back, to the first host's
// address, is not), the connection arrives from the first host's own
// address, and the link's cleanup removes its rules and its proxy.
func TestDelayLink(t *testing.T) {
	const d = 15 * time.Millisecond
	n := NewNetwork(t)
	h1, h2 := n.AddHost(t, "a"), n.AddHost(t, "b")
	target := net.JoinHostPort(h2.Addr, "2380")
	back := net.JoinHostPort(h1.Addr, "2380")
	t.Run("delayed", func(t *testing.T) {
		l := h1.DelayLink(t, target, d)
		rtts, err := h1.MeasureRTT(t, h2, target, 10)
		if err != nil {
			t.Fatal(err)
		}
		if rtts[0] < 2*d || rtts[len(rtts)/2] > 2*d+20*time.Millisecond {
			t.Errorf("round trips h1 -> h2 %v, want about 2 x %s", rtts, d)
		}
		if s := l.Proxy.Stats(); s.Conns != 1 {
			t.Errorf("proxy stats %+v, want the one connection", s)
		}
		rtts, err = h2.MeasureRTT(t, h1, back, 10)
		if err != nil {
			t.Fatal(err)
		}
		if rtts[len(rtts)/2] >= d {
			t.Errorf("round trips h2 -> h1 %v: delayed, but no link goes that way", rtts)
		}
		// The far end sees the near host's own address.
		var ln net.Listener
		if err := h2.InNetns(func() (err error) { ln, err = net.Listen("tcp4", target); return err }); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		from := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				from <- err.Error()
				return
			}
			from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}()
		if err := h1.InNetns(func() error {
			c, err := net.DialTimeout("tcp4", target, 10*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got := <-from; got != h1.Addr {
			t.Errorf("connection through the proxy came from %s, want host a's %s", got, h1.Addr)
		}
		if r, err := h1.DelayRules(); err != nil || !strings.Contains(r, "redirect") {
			t.Errorf("rules of host a: %q, %v", r, err)
		}
	})
	// The subtest's cleanup removed the rules and the proxy.
	if r, err := h1.DelayRules(); err != nil || r != "" {
		t.Errorf("rules of host a after the link's cleanup: %q, %v", r, err)
	}
	rtts, err := h1.MeasureRTT(t, h2, target, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rtts[len(rtts)/2] >= d {
		t.Errorf("round trips h1 -> h2 after the link's cleanup %v: still delayed", rtts)
	}
}
