package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/pkg/backup"
)

// TestKeyHint: reading an encrypted backup without a key gets the
// --key-file advice and keeps its chain; other errors pass unchanged.
func TestKeyHint(t *testing.T) {
	need := fmt.Errorf("backup b1 is encrypted (key id k1): %w", backup.ErrNeedKey)
	got := KeyHint(need)
	if want := "backup b1 is encrypted (key id k1): no key given; give its key with --key-file"; got.Error() != want {
		t.Errorf("KeyHint = %q, want %q", got, want)
	}
	if !errors.Is(got, backup.ErrNeedKey) {
		t.Errorf("KeyHint lost the chain: %v", got)
	}
	if other := fmt.Errorf("backup b1: %w", backup.ErrWrongKey); KeyHint(other) != other {
		t.Errorf("KeyHint changed %v", other)
	}
	if KeyHint(nil) != nil {
		t.Error("KeyHint(nil) != nil")
	}
}
