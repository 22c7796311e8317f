package localkube

// The control-plane endpoint of a cluster of three: a TCP load balancer on
// the bridge's address (GATEWAY:6443), as kubeadm's HA setup puts one in
// front of the API servers. The admin's kubeconfig, each kubelet's and each
// kube-proxy's use it. It runs in the owner process (like the volume
// provisioner) and passes each connection to the next API server in turn
// that accepts one within a second: one stopped API server costs its
// clients a reconnect, not the cluster.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

type loadBalancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex // owns conns
	conns    map[net.Conn]bool
}

func startLoadBalancer(addr string, backends []string) (*loadBalancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	lb := &loadBalancer{ln: ln, backends: backends, conns: map[net.Conn]bool{}}
	lb.wg.Add(1)
	go lb.serve()
	return lb, nil
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
	start := lb.next.Add(1)
	var backend net.Conn
	for i := range lb.backends {
		addr := lb.backends[(int(start)+i)%len(lb.backends)]
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
	lb.mu.Lock()
	for c := range lb.conns {
		_ = c.Close()
	}
	lb.conns = nil
	lb.mu.Unlock()
	lb.wg.Wait()
}
