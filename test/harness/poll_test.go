package harness

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fatalTB records Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

// TestEventuallyReportsTheLastError: a timeout names what was awaited and
// the condition's last error; a condition that comes true is not failed.
func TestEventuallyReportsTheLastError(t *testing.T) {
	tb := &fatalTB{TB: t}
	n := 0
	Eventually(tb, 30*time.Millisecond, time.Millisecond, "the answer", func() error {
		n++
		return fmt.Errorf("attempt %d: not yet", n)
	})
	want := fmt.Sprintf("timed out after 30ms waiting for the answer: last error: attempt %d: not yet", n)
	if tb.msg != want || n < 2 {
		t.Errorf("got %q after %d calls, want %q", tb.msg, n, want)
	}

	tb = &fatalTB{TB: t}
	n = 0
	Eventually(tb, time.Second, time.Millisecond, "the third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if tb.msg != "" || n != 3 {
		t.Errorf("a condition that came true on call 3: failed with %q after %d calls", tb.msg, n)
	}
}

// TestPollReturnsTheLastError: Poll wraps the condition's last error.
func TestPollReturnsTheLastError(t *testing.T) {
	last := errors.New("still down")
	err := Poll(10*time.Millisecond, time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || err.Error() != "timed out after 10ms: last error: still down" {
		t.Errorf("Poll: %v", err)
	}
	if err := Poll(time.Second, time.Millisecond, func() error { return nil }); err != nil {
		t.Errorf("Poll of a true condition: %v", err)
	}
}
