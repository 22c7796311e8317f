package kmigrate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Outcome is what a migration does after a request returned an error.
type Outcome int

const (
	// Done: the request succeeded.
	Done Outcome = iota
	// Skip: the object is gone (404); nothing to rewrite.
	Skip
	// Refetch: the object changed since it was listed (409 Conflict); get
	// it again and retry the update.
	Refetch
	// Retry: a transient failure (429, 5xx, timeouts, a broken
	// connection); wait and send the same request again.
	Retry
	// Expired: the list's continue token is too old (410 Gone).
	Expired
	// Reject: the API server refused this object (an admission webhook or
	// policy, validation: 400, 403, 422, ...); record it and go on.
	Reject
	// Abort: nothing more can be done with these credentials or this
	// context (401 Unauthorized, cancellation).
	Abort
)

func (o Outcome) String() string {
	return [...]string{"done", "skip", "refetch", "retry", "expired", "reject", "abort"}[o]
}

// Classify says what to do after a request that returned err, and how
// long the server asked the client to wait before retrying (its
// Retry-After, zero when none).
func Classify(err error) (Outcome, time.Duration) {
	if err == nil {
		return Done, 0
	}
	var after time.Duration
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		after = time.Duration(s) * time.Second
	}
	if errors.Is(err, context.Canceled) {
		return Abort, 0
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := int(st.Status().Code)
		switch {
		case apierrors.IsNotFound(err):
			return Skip, 0
		case apierrors.IsConflict(err):
			return Refetch, 0
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			return Expired, 0
		case apierrors.IsUnauthorized(err):
			return Abort, 0
		case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
			apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err),
			code >= 500:
			return Retry, after
		case code == 0 && after > 0:
			return Retry, after
		}
		return Reject, 0
	}
	// Not an answer of the API server: a refused or broken connection, a
	// timeout, a truncated body. The request may or may not have reached
	// the server; an update that changes nothing is safe to send again.
	return Retry, 0
}

// Backoff is the retry policy for transient failures.
type Backoff struct {
	// Attempts is the most requests sent for one operation (the first
	// included); 0 means 8.
	Attempts int
	// Initial is the first wait; 0 means 250 ms. Each later wait doubles,
	// up to Max (0 means 30 s), with ±20% jitter.
	Initial, Max time.Duration
	// MaxRetryAfter caps a wait the server asked for with Retry-After;
	// 0 means 60 s.
	MaxRetryAfter time.Duration
}

func (b Backoff) attempts() int {
	if b.Attempts <= 0 {
		return 8
	}
	return b.Attempts
}

// Delay is the wait before attempt n+1 after n failed attempts (n >= 1):
// the server's Retry-After when it sent one (capped), else exponential.
func (b Backoff) Delay(n int, retryAfter time.Duration) time.Duration {
	maxAfter := b.MaxRetryAfter
	if maxAfter <= 0 {
		maxAfter = time.Minute
	}
	if retryAfter > 0 {
		return min(retryAfter, maxAfter)
	}
	initial, maxDelay := b.Initial, b.Max
	if initial <= 0 {
		initial = 250 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	d := initial
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// ErrUnavailable wraps the last error of an operation that failed
// transiently on every attempt.
var ErrUnavailable = errors.New("the API server kept failing")

// retry runs op until it succeeds or fails with something other than
// Retry, waiting between attempts; it gives up after b's attempts with an
// error wrapping ErrUnavailable. onRetry (optional) is called before each
// wait.
func retry(ctx context.Context, b Backoff, op func() error, onRetry func(attempt int, err error, wait time.Duration)) error {
	for n := 1; ; n++ {
		err := op()
		out, after := Classify(err)
		if out != Retry {
			return err
		}
		if n >= b.attempts() {
			return fmt.Errorf("%w: %d attempts, the last: %w", ErrUnavailable, n, err)
		}
		wait := b.Delay(n, after)
		if onRetry != nil {
			onRetry(n, err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
