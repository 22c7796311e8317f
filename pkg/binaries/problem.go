package binaries

import "errors"

// A stored binary's problem that keeps a version from running is a
// *ProblemError: what is wrong (its Kind, a stable code), the version and
// the store, and a message that says how to fix it in words ("import it").
// The library names no command: the command layer adds it where the
// message is shown (cli.LibraryAdvice for errors, also in the agent's API
// errors and a member's last error; cli.CheckMessage for the upgrade
// pre-flight, whose checks carry the Problem of a host's BinaryCheck,
// since the agent API carries it as a kind beside the text).

// Kinds of stored binaries' problems (Problem.Kind): stable codes, carried
// in JSON and over the agent API (BinaryCheck.ProblemKind).
const (
	// KindNotInStore: the version is neither in the store nor the
	// embedded one (the error wraps ErrNotFound).
	KindNotInStore = "notInStore"
	// KindNotRecorded: a stored tool has no SHA-256 recorded at import
	// (ErrNotRecorded).
	KindNotRecorded = "notRecorded"
	// KindChanged: a stored tool is not the file imported (ErrBinaryChanged).
	KindChanged = "changed"
)

// Problem is what is wrong with a version of a store. Its JSON field names
// are stable.
type Problem struct {
	Kind    string `json:"kind"`
	Version string `json:"version"`
	// Store is the store's directory.
	Store string `json:"store"`
	// Message is the problem in the library's words: the command layer
	// names the command that fixes it inside them.
	Message string `json:"message"`
}

// ProblemError is a Problem as an error; it wraps the sentinel of its kind
// (ErrNotFound, ErrNotRecorded, ErrBinaryChanged).
type ProblemError struct {
	Problem
	err error
}

func (e *ProblemError) Error() string { return e.Message }
func (e *ProblemError) Unwrap() error { return e.err }

// ProblemOf is the stored binary's problem in err's chain, if any.
func ProblemOf(err error) (Problem, bool) {
	if pe, ok := errors.AsType[*ProblemError](err); ok {
		return pe.Problem, true
	}
	return Problem{}, false
}
