package localkube

// The control-plane endpoint of a cluster of three: a TCP load balancer on
// the bridge's address (GATEWAY:6443), as kubeadm's HA setup puts one in
// front of the API servers. The admin's kubeconfig, each kubelet's and each
// kube-proxy's use it. It runs in the owner process (like the volume
// provisioner) and passes each connection to the next API server in turn
// that accepts one within a second: one stopped API server costs its
// clients a reconnect, not the cluster.
//
// As kubeadm's HA guide has HAProxy check its backends, it asks each API
// server's /readyz every readyEvery (anonymously: kubeadm's RBAC lets
// anyone read it) and passes new connections to ready servers first, to
// the others only when none is ready. An API server told to stop fails
// its /readyz at once (its shutdown-delay-duration then keeps it serving
// while the balancer notices): new connections go elsewhere while its own
// drain.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// readyEvery is how often the balancer asks each API server's /readyz.
const readyEvery = 500 * time.Millisecond

type loadBalancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex // owns conns
	conns    map[net.Conn]bool
	// notReady[i] is set while backend i's last /readyz did not answer
	// 200 (written by the checker, read by every connection).
	notReady []atomic.Bool
	stop     chan struct{}
}

func startLoadBalancer(addr string, backends []string) (*loadBalancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	lb := &loadBalancer{ln: ln, backends: backends, conns: map[net.Conn]bool{}, notReady: make([]atomic.Bool, len(backends)), stop: make(chan struct{})}
	lb.wg.Add(2)
	go lb.serve()
	go lb.check()
	return lb, nil
}

// check asks every backend's /readyz each readyEvery until Close.
func (lb *loadBalancer) check() {
	defer lb.wg.Done()
	hc := &http.Client{Timeout: readyEvery, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a readiness probe of the cluster's own servers; nothing is sent
		DisableKeepAlives: true,
	}}
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for i, b := range lb.backends {
			wg.Go(func() {
				ok := false
				if resp, err := hc.Get("https://" + b + "/readyz"); err == nil {
					ok = resp.StatusCode == http.StatusOK
					_ = resp.Body.Close()
				}
				lb.notReady[i].Store(!ok)
			})
		}
		wg.Wait()
		select {
		case <-lb.stop:
			return
		case <-t.C:
		}
	}
}

// order is the backends to try for a connection: from the next in turn,
// the ready ones first.
func (lb *loadBalancer) order() []string {
	start := int(lb.next.Add(1))
	var ready, other []string
	for i := range lb.backends {
		j := (start + i) % len(lb.backends)
		if lb.notReady[j].Load() {
			other = append(other, lb.backends[j])
		} else {
			ready = append(ready, lb.backends[j])
		}
	}
	return append(ready, other...)
}

func (lb *loadBalancer) serve() {
	defer lb.wg.Done()
	for {
		c, err := lb.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		lb.wg.Add(1)
		go func() { defer lb.wg.Done(); lb.pass(c) }()
	}
}

func (lb *loadBalancer) track(c net.Conn, on bool) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.conns == nil {
		return false // closed
	}
	if on {
		lb.conns[c] = true
	} else {
		delete(lb.conns, c)
	}
	return true
}

func (lb *loadBalancer) pass(client net.Conn) {
	defer client.Close()
	if !lb.track(client, true) {
		return
	}
	defer lb.track(client, false)
	var backend net.Conn
	for _, addr := range lb.order() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			backend = c
			break
		}
	}
	if backend == nil {
		return
	}
	defer backend.Close()
	if !lb.track(backend, true) {
		return
	}
	defer lb.track(backend, false)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(backend, client)
	go cp(client, backend)
	<-done
	<-done
}

// Close stops listening, closes every connection and waits for them.
func (lb *loadBalancer) Close() {
	_ = lb.ln.Close()
	close(lb.stop)
	lb.mu.Lock()
	for c := range lb.conns {
		_ = c.Close()
	}
	lb.conns = nil
	lb.mu.Unlock()
	lb.wg.Wait()
}
