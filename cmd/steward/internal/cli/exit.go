package cli

import "fmt"

// ExitError ends the command with exit code Code. Err, when set, is printed
// as any other error ("Error: ..."); a nil Err prints nothing (the command
// has said what it had to: `steward status` on a stopped cluster, or
// etcdctl's own exit code passed on by `steward etcdctl`).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }
