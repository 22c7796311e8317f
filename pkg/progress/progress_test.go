package progress

import (
	"bytes"
	"testing"
)

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 100 << 20: "100.0 MiB", 2 << 30: "2.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestFunc(t *testing.T) {
	var nilFunc Func
	nilFunc.Say("discarded %d", 1) // must not panic
	nilFunc.Indent("  ").Say("discarded too")

	var b bytes.Buffer
	f := To(&b)
	f.Say("step %d", 1)
	f.Indent("  ").Say("detail %s", "x")
	if got, want := b.String(), "step 1\n  detail x\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
