package harness

// DelayProxy: latency between hosts without the kernel's netem qdisc, which
// the project's test machines lack (CONFIG_NET_SCH_NETEM is not set, and
// the kernel loads no modules). A TCP proxy that holds every chunk it reads
// until its arrival time + D before writing it on, in both directions, so
// every byte through it is D late each way and a round trip through it
// takes at least 2D. Hosts.DelayPeers puts one on every peer link between
// two hosts (DelayPeers, below, says how the traffic is routed to it).
//
// Invariants, enforced by pipe:
//   - order: one reader and one writer per direction, a FIFO between them;
//   - bounded: at most delayQueueChunks chunks of at most delayChunkBytes
//     wait per direction; a reader that finds the queue full waits (TCP's
//     flow control then slows the sender) instead of dropping bytes, which
//     a byte stream cannot do, and counts the wait (Stats.QueueFull);
//   - close propagation: an EOF from one side is passed on as a half-close
//     (CloseWrite) once every chunk before it was written; the connection
//     pair is closed when both directions ended; an error on either side
//     (a reset, a failed write) closes both at once;
//   - cleanup: Close stops accepting, closes every connection and returns
//     once every goroutine of the proxy has ended.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// delayChunkBytes is the most one read takes from a connection.
	delayChunkBytes = 32 << 10
	// delayQueueChunks bounds the chunks waiting in one direction of one
	// connection: 8 MiB at most, 400 MB/s at D = 20 ms, far above what
	// etcd's peers send.
	delayQueueChunks = 256
)

// DelayProxy accepts connections on a listener, dials its target for each
// and copies both ways, every chunk delayed by Delay. Its methods are safe
// for concurrent use.
type DelayProxy struct {
	// Delay is what every byte waits in the proxy, each way.
	Delay time.Duration

	ln   net.Listener
	dial func(context.Context) (net.Conn, error)
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu: every open connection, both sides

	nConns, bytes, queueFull, dialErrs atomic.Int64
}

// DelayStats is what a DelayProxy forwarded.
type DelayStats struct {
	// Conns is the number of connections accepted and dialled through.
	Conns int64
	// Bytes is the number of bytes written on, both directions.
	Bytes int64
	// QueueFull counts the reads that found their direction's queue full
	// and waited for room: the proxy's bound at work (it never drops).
	QueueFull int64
	// DialErrors counts accepted connections whose target could not be
	// dialled (closed at once).
	DialErrors int64
}

// NewDelayProxy serves ln until Close: each accepted connection is joined
// to a connection from dial, every chunk delayed by d each way. It takes
// ln over (Close closes it).
func NewDelayProxy(ln net.Listener, d time.Duration, dial func(context.Context) (net.Conn, error)) *DelayProxy {
	ctx, stop := context.WithCancel(context.Background())
	p := &DelayProxy{Delay: d, ln: ln, dial: dial, ctx: ctx, stop: stop, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p
}

// Addr is the proxy's listening address.
func (p *DelayProxy) Addr() net.Addr { return p.ln.Addr() }

// Stats returns the proxy's counters.
func (p *DelayProxy) Stats() DelayStats {
	return DelayStats{Conns: p.nConns.Load(), Bytes: p.bytes.Load(), QueueFull: p.queueFull.Load(), DialErrors: p.dialErrs.Load()}
}

// Close stops accepting, closes every connection (chunks still held are
// lost, as on a link that goes away) and waits for every goroutine of the
// proxy to end.
func (p *DelayProxy) Close() error {
	p.stop()
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *DelayProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (Close), or a listener that cannot go on
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track adds c to the open connections, or closes it and says false when
// the proxy is closing.
func (p *DelayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *DelayProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *DelayProxy) handle(in net.Conn) {
	defer p.wg.Done()
	if !p.track(in) {
		return
	}
	defer p.untrack(in)
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	out, err := p.dial(ctx)
	cancel()
	if err != nil {
		p.dialErrs.Add(1)
		return
	}
	if !p.track(out) {
		return
	}
	defer p.untrack(out)
	p.nConns.Add(1)
	// abort closes both sides at once: an error on either.
	var once sync.Once
	aborted := make(chan struct{})
	abort := func() { once.Do(func() { close(aborted); in.Close(); out.Close() }) }
	stop := context.AfterFunc(p.ctx, abort) // Close: no wait for held bytes
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in, abort, aborted) }()
	go func() { defer wg.Done(); p.pipe(in, out, abort, aborted) }()
	wg.Wait()
}

// chunk is one read, due to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk written no earlier than its arrival +
// p.Delay, in order. At src's EOF it half-closes dst after the last chunk;
// on any other error it aborts the pair.
func (p *DelayProxy) pipe(dst, src net.Conn, abort func(), aborted <-chan struct{}) {
	q := make(chan chunk, delayQueueChunks)
	done := make(chan struct{}) // closed when the writer stops
	readDone := make(chan struct{})
	var readErr error // the reader's; read after q is closed
	go func() {
		defer close(readDone)
		defer close(q)
		buf := make([]byte, delayChunkBytes)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{b: bytes.Clone(buf[:n]), due: time.Now().Add(p.Delay)}
				select {
				case q <- c:
				default:
					p.queueFull.Add(1)
					select {
					case q <- c:
					case <-done:
						return
					}
				}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	defer func() {
		close(done)
		<-readDone // src is at EOF, or closed by abort
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-aborted:
				return
			}
		}
		n, err := dst.Write(c.b)
		p.bytes.Add(int64(n))
		if err != nil {
			abort()
			return
		}
	}
	if !errors.Is(readErr, io.EOF) {
		abort()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	abort()
}
