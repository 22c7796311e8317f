package kmigrate

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgress(t *testing.T) {
	for _, tty := range []bool{true, false} {
		var buf bytes.Buffer
		p := newProgress(&buf, tty, time.Hour) // no periodic redraw: draw by hand
		p.begin("configmaps", 1, 2, &RunState{Migrated: 100, Skipped: 1, Failed: 2})
		p.setTotal(1003)
		p.start = time.Now().Add(-10 * time.Second)
		for i := 0; i < 400; i++ {
			p.add(Done)
		}
		p.add(Reject)
		p.mu.Lock()
		p.draw()
		p.mu.Unlock()
		p.printf("a line of its own")
		p.end()
		p.close()
		out := buf.String()
		// 504 of 1003 done; 401 in this run's 10 s: 40/s, 499 left: about 12 s.
		for _, want := range []string{"[1/2] configmaps", "504/1003", " 50%", "3 failed, 1 skipped", "40 objects/s", "ETA 12s", "a line of its own\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("tty %v: %q does not show %q", tty, out, want)
			}
		}
		if tty != strings.Contains(out, "\r\x1b[K") || tty != strings.Contains(out, "[============") {
			t.Errorf("tty %v: %q", tty, out)
		}
		if !tty && !strings.HasSuffix(strings.Split(out, "a line")[0], "\n") {
			t.Errorf("plain progress line not ended: %q", out)
		}
	}
}
