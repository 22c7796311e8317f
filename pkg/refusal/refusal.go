// Package refusal owns Refusal: an operation refused before it changed anything, of a kind a command recognises to add its own advice.
package refusal

import "fmt"

// Refusal is an operation refused before it changed anything. Its message
// says what and why; Kind is a sentinel of the refusing package that a
// command matches (errors.Is) to add advice about its own flags, which the
// library does not know.
type Refusal struct {
	Kind error
	Msg  string
}

func (r *Refusal) Error() string { return r.Msg }

// Unwrap makes errors.Is(err, r.Kind) hold.
func (r *Refusal) Unwrap() error { return r.Kind }

// New returns a *Refusal of kind with a formatted message.
func New(kind error, format string, args ...any) error {
	return &Refusal{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
