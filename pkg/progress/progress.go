// Package progress is the one shape of user-facing progress in Steward: a
// printf-style function that prints one line per step of a long operation.
// Libraries take a Func and commands hand them one that writes to stderr;
// daemons (the agent, the backup loop, automatic recovery) log with log/slog
// instead.
package progress

import (
	"fmt"
	"io"
)

// Func prints one progress line (no trailing newline in format). The zero
// value discards: call Say (or Printf) on it without a nil check.
type Func func(format string, args ...any)

// Say prints a line through f; a nil f discards it.
func (f Func) Say(format string, args ...any) {
	if f != nil {
		f(format, args...)
	}
}

// To returns a Func writing each line to w.
func To(w io.Writer) Func {
	return func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
}

// Indent returns a Func that prints through f with prefix before each line.
func (f Func) Indent(prefix string) Func {
	if f == nil {
		return nil
	}
	return func(format string, args ...any) { f(prefix+format, args...) }
}

// Bytes formats a byte count for progress lines: 512 B, 1.5 KiB, 2.0 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
