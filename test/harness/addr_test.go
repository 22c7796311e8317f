package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoopbackAddrHeldUntilReleased: an address is never handed out twice
// while held, is one of 127.X.Y.1 with X at least 1, and its lock file is
// gone once released.
func TestLoopbackAddrHeldUntilReleased(t *testing.T) {
	held := map[string]func(){}
	for range 50 {
		a, release, err := takeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := held[a]; dup {
			t.Fatalf("%s handed out twice while held", a)
		}
		if !strings.HasPrefix(a, "127.") || !strings.HasSuffix(a, ".1") || strings.HasPrefix(a, "127.0.") {
			t.Fatalf("address %s: want 127.X.Y.1 with X >= 1", a)
		}
		held[a] = release
	}
	for a, release := range held {
		// Locked by this process: another open file description of the
		// same path cannot take it.
		if _, err := lockAddr(filepath.Join(addrLockDir, a)); err != errAddrTaken {
			t.Errorf("%s: a second lock got %v, want errAddrTaken", a, err)
		}
		release()
		if _, err := os.Stat(filepath.Join(addrLockDir, a)); !os.IsNotExist(err) {
			t.Errorf("%s: lock file left after release (%v)", a, err)
		}
	}
}
