package core_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// forward listens on addr (port 0: any free port) and copies every
// connection, both ways, to to: another member answering on the address it
// returns, as behind an alias or a reused port.
// stop closes the listener and every connection and waits for them;
// cleanup calls it too, for a test that ends early.
func forward(t *testing.T, addr, to string) (listening string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // guarded by mu
	closed := false      // guarded by mu
	// track keeps c to close at cleanup; after cleanup, it closes c now.
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			l.Close()
			mu.Lock()
			closed = true
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in) || !track(out) {
				in.Close()
				out.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String(), stop
}
