package alarm

import (
	"errors"
	"testing"

	"github.com/etcd-steward/steward/pkg/maintenance"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// TestDisarmHint: a refused disarm of a CORRUPT alarm reads as it did when
// the library named `steward member replace`: the command adds it, then
// its --force; other errors pass unchanged.
func TestDisarmHint(t *testing.T) {
	err := &maintenance.CorruptError{Refusal: refusal.Refusal{Kind: maintenance.ErrCorrupt,
		Msg: "member m2 (8e9e05c52164694d) has a CORRUPT alarm: its data diverged from the others"}, Member: "m2"}
	got := disarmHint(err)
	want := "member m2 (8e9e05c52164694d) has a CORRUPT alarm: its data diverged from the others; replace it with `steward member replace m2`; use --force to disarm it anyway"
	if got.Error() != want || !errors.Is(got, maintenance.ErrCorrupt) {
		t.Errorf("disarmHint = %q\nwant %q", got, want)
	}
	other := errors.New("no quorum")
	if disarmHint(other) != other || disarmHint(nil) != nil {
		t.Error("disarmHint changed an error it has no advice for")
	}
}
