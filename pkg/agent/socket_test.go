package agent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesLongSocket: a socket path above the Unix limit is refused
// with ErrSocketPathTooLong, in words that name no flag.
func TestRunRefusesLongSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, strings.Repeat("d", 100), "agent.sock")
	err := New(Options{Dir: dir, Socket: sock}).Run(context.Background())
	if !errors.Is(err, ErrSocketPathTooLong) {
		t.Fatalf("Run: %v, want ErrSocketPathTooLong", err)
	}
	if !strings.Contains(err.Error(), sock) || strings.Contains(err.Error(), "--") {
		t.Errorf("Run: %q, want the path and no flag", err)
	}
}
