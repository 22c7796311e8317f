package cli

import (
	"errors"
	"fmt"
	"testing"
)

// TestHint: an error of the kind gets the hint after it and keeps its
// chain; nil and other errors pass unchanged.
func TestHint(t *testing.T) {
	kind := errors.New("agent socket path too long")
	err := fmt.Errorf("%w: /d/run/agent.sock is 120 bytes", kind)
	got := Hint(err, kind, "use a shorter --dir")
	if want := "agent socket path too long: /d/run/agent.sock is 120 bytes; use a shorter --dir"; got.Error() != want {
		t.Errorf("Hint = %q, want %q", got, want)
	}
	if !errors.Is(got, kind) || errors.Unwrap(got) != err {
		t.Errorf("Hint lost the chain: %v", got)
	}
	other := errors.New("permission denied")
	if Hint(other, kind, "use a shorter --dir") != other || Hint(nil, kind, "x") != nil {
		t.Error("Hint changed an error of another kind, or nil")
	}
}
