package progress

// Hint is a step the operator takes, named in a progress line (an
// argument of Say, printed with %v): the library says what step (Kind,
// declared by the package that says it, and Args, such as a member's
// name), the command layer says which of its commands takes it. A Func
// the command layer makes writes the command (cli.Progress); any other
// writes Plain, the step in words.
type Hint struct {
	Kind  HintKind
	Args  []string
	Plain string
}

// HintKind names a step a Hint stands for.
type HintKind string

// String is the step in words, for a Func that knows no commands.
func (h Hint) String() string { return h.Plain }

// Rendered returns f's progress lines with each Hint argument replaced by
// what words returns for it (the Hint itself when words returns "").
func (f Func) Rendered(words func(Hint) string) Func {
	if f == nil {
		return nil
	}
	return func(format string, args ...any) {
		out := make([]any, len(args)) // the caller's arguments stay as they are
		for i, a := range args {
			out[i] = a
			if h, ok := a.(Hint); ok {
				if w := words(h); w != "" {
					out[i] = w
				}
			}
		}
		f(format, out...)
	}
}
