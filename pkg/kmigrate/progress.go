package kmigrate

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows how a resource's migration goes: a bar redrawn in place
// on a terminal, or a plain line every interval otherwise.
//
// Goroutines: its own redraw loop, the migration's resource goroutine
// (begin, setTotal, end, printf), the updater workers (add) and client-go's
// warning handler (printf). w, tty, interval, stop and done never change
// after newProgress; every other field, and every write to w, is guarded
// by mu.
type progress struct {
	w        io.Writer // written to only under mu
	tty      bool
	interval time.Duration

	mu       sync.Mutex
	resource string // guarded by mu, like every field down to changed
	index, n int
	// processed counts objects done in the whole migration of the
	// resource; base is where this run started.
	processed, base int64
	migrated        int64
	failed, skipped int64
	total           int64 // estimate; -1 unknown
	start           time.Time
	drawn           bool // a bar is on the current line
	changed         bool
	stop            chan struct{} // closed by close; the loop returns
	done            chan struct{} // closed by the loop as it returns
}

func newProgress(w io.Writer, tty bool, interval time.Duration) *progress {
	if w == nil {
		w = io.Discard
		tty = false
	}
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if tty {
		interval = 200 * time.Millisecond
	}
	p := &progress{w: w, tty: tty, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.resource != "" && (p.tty || p.changed) {
				p.draw()
				p.changed = false
			}
			p.mu.Unlock()
		}
	}
}

// close stops the redrawing and ends the bar's line.
func (p *progress) close() {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

// printf writes a line of its own (the bar is redrawn after it).
func (p *progress) printf(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, format+"\n", a...)
}

func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// begin starts a resource: index of n, with done objects already
// processed (a resumed migration) out of about total (-1: unknown).
func (p *progress) begin(resource string, index, n int, rs *RunState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resource, p.index, p.n = resource, index, n
	p.processed, p.base = rs.Processed(), rs.Processed()
	p.migrated, p.failed, p.skipped = rs.Migrated, rs.Failed, rs.Skipped
	p.total = -1
	p.start = time.Now()
	p.changed = true
}

// setTotal records the estimated number of objects of the resource.
func (p *progress) setTotal(total int64) {
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
}

// add counts one object.
func (p *progress) add(o Outcome) {
	p.mu.Lock()
	p.processed++
	switch o {
	case Done:
		p.migrated++
	case Skip:
		p.skipped++
	default:
		p.failed++
	}
	p.changed = true
	p.mu.Unlock()
}

// end finishes a resource's bar.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.resource = ""
}

func (p *progress) draw() {
	elapsed := time.Since(p.start)
	done := p.processed - p.base
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	var of, eta, pct string
	frac := -1.0
	if p.total >= 0 {
		total := max(p.total, p.processed)
		of = fmt.Sprintf("/%d", total)
		if total > 0 {
			frac = float64(p.processed) / float64(total)
			pct = fmt.Sprintf(" %3.0f%%", 100*frac)
		}
		if rate > 0 {
			eta = " ETA " + time.Duration(float64(total-p.processed)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	counts := fmt.Sprintf("%d%s%s, %d failed, %d skipped, %.0f objects/s%s", p.processed, of, pct, p.failed, p.skipped, rate, eta)
	if p.tty {
		bar := strings.Repeat(" ", 24)
		if frac >= 0 {
			n := int(frac * 24)
			bar = strings.Repeat("=", n) + strings.Repeat(" ", 24-n)
		}
		fmt.Fprintf(p.w, "\r\x1b[K[%d/%d] %s [%s] %s", p.index, p.n, p.resource, bar, counts)
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", p.index, p.n, p.resource, counts)
}
