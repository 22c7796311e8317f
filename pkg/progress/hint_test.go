package progress

import (
	"strings"
	"testing"
)

// TestHint: a Hint prints its plain words through any Func, and the
// command's words through a rendered one; other arguments pass as they
// are, and the caller's arguments are not changed.
func TestHint(t *testing.T) {
	var b strings.Builder
	h := Hint{Kind: "restart-member", Args: []string{"m1"}, Plain: "a restart of m1"}
	To(&b).Say("note: %s runs an older config; %v applies it", "m1", h)
	words := func(h Hint) string {
		if h.Kind == "restart-member" {
			return "`restart " + h.Args[0] + "`"
		}
		return ""
	}
	args := []any{"m1", h}
	To(&b).Rendered(words).Say("note: %s runs an older config; %v applies it", args...)
	To(&b).Rendered(words).Say("%v", Hint{Kind: "other", Plain: "plain"})
	want := "note: m1 runs an older config; a restart of m1 applies it\nnote: m1 runs an older config; `restart m1` applies it\nplain\n"
	if b.String() != want {
		t.Errorf("lines:\n%s\nwant\n%s", b.String(), want)
	}
	if _, ok := args[1].(Hint); !ok {
		t.Error("the caller's arguments changed")
	}
	if Func(nil).Rendered(words) != nil {
		t.Error("a nil Func rendered is not nil")
	}
}
