package kmigrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestClassify(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	refused := &url.Error{Op: "Put", URL: "https://127.0.0.1:1/api/v1/configmaps",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	withRetryAfter := apierrors.NewTooManyRequests("slow down", 3)
	unavailable := apierrors.NewGenericServerResponse(503, "PUT", cm, "x", "", 7, true)
	for _, tc := range []struct {
		name  string
		err   error
		want  Outcome
		after time.Duration
	}{
		{"nil", nil, Done, 0},
		{"404", apierrors.NewNotFound(cm, "x"), Skip, 0},
		{"409", apierrors.NewConflict(cm, "x", errors.New("the object has been modified")), Refetch, 0},
		{"410 expired", apierrors.NewResourceExpired("too old"), Expired, 0},
		{"410 gone", apierrors.NewGone("gone"), Expired, 0},
		{"429 Retry-After 3", withRetryAfter, Retry, 3 * time.Second},
		{"429 wrapped", fmt.Errorf("update: %w", withRetryAfter), Retry, 3 * time.Second},
		{"500", apierrors.NewInternalError(errors.New("boom")), Retry, 0},
		{"503 Retry-After 7", unavailable, Retry, 7 * time.Second},
		{"502", apierrors.NewGenericServerResponse(502, "PUT", cm, "x", "", 0, true), Retry, 0},
		{"504 server timeout", apierrors.NewServerTimeout(cm, "update", 2), Retry, 2 * time.Second},
		{"request timeout", apierrors.NewTimeoutError("timed out", 0), Retry, 0},
		{"connection refused", refused, Retry, 0},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, Retry, 0},
		{"EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), Retry, 0},
		{"deadline", context.DeadlineExceeded, Retry, 0},
		{"401", apierrors.NewUnauthorized("token expired"), Abort, 0},
		{"canceled", fmt.Errorf("put: %w", context.Canceled), Abort, 0},
		{"403 webhook", apierrors.NewForbidden(cm, "x", errors.New("admission webhook \"deny.example.com\" denied the request")), Reject, 0},
		{"422 policy", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", field.ErrorList{field.Forbidden(field.NewPath("data"), "no")}), Reject, 0},
		{"400", apierrors.NewBadRequest("bad"), Reject, 0},
		{"405", apierrors.NewMethodNotSupported(cm, "update"), Reject, 0},
		{"413", apierrors.NewRequestEntityTooLargeError("too large"), Reject, 0},
	} {
		got, after := Classify(tc.err)
		if got != tc.want || after != tc.after {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, after, tc.want, tc.after)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, MaxRetryAfter: 5 * time.Second}
	for n, base := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		for i := 0; i < 50; i++ {
			d := b.Delay(n, 0)
			if d < base*8/10 || d > base*12/10 {
				t.Fatalf("Delay(%d) = %s, want %s ± 20%%", n, d, base)
			}
		}
	}
	if d := b.Delay(1, 3*time.Second); d != 3*time.Second {
		t.Errorf("Retry-After 3s: %s", d)
	}
	if d := b.Delay(1, time.Hour); d != 5*time.Second {
		t.Errorf("Retry-After 1h: %s, want the 5s cap", d)
	}
	var zero Backoff
	if d := zero.Delay(1, 0); d < 200*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("default first delay %s", d)
	}
	if d := zero.Delay(100, 0); d < 24*time.Second || d > 36*time.Second {
		t.Errorf("default cap %s", d)
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	b := Backoff{Attempts: 4, Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxRetryAfter: 3 * time.Millisecond}
	var waits []time.Duration
	onRetry := func(_ int, _ error, w time.Duration) { waits = append(waits, w) }

	// Transient failures, then success.
	n := 0
	err := retry(ctx, b, func() error {
		n++
		switch n {
		case 1:
			return apierrors.NewTooManyRequests("slow down", 1) // Retry-After 1 s, capped at 3 ms
		case 2:
			return apierrors.NewInternalError(errors.New("etcd leader changed"))
		}
		return nil
	}, onRetry)
	if err != nil || n != 3 || len(waits) != 2 || waits[0] != 3*time.Millisecond {
		t.Fatalf("err %v after %d attempts, waits %v", err, n, waits)
	}

	// Every attempt fails: the last error, wrapped in ErrUnavailable.
	n, waits = 0, nil
	last := apierrors.NewServiceUnavailable("down")
	err = retry(ctx, b, func() error { n++; return last }, onRetry)
	if !errors.Is(err, ErrUnavailable) || !apierrors.IsServiceUnavailable(err) || n != 4 || len(waits) != 3 {
		t.Fatalf("exhausted: %v after %d attempts, %d waits", err, n, len(waits))
	}

	// Anything but Retry is returned at once.
	for _, e := range []error{apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("modified")),
		apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("denied")), nil} {
		n = 0
		if err := retry(ctx, b, func() error { n++; return e }, nil); err != e || n != 1 {
			t.Errorf("%v: got %v after %d attempts", e, err, n)
		}
	}

	// A cancelled context ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	slow := Backoff{Attempts: 10, Initial: time.Hour, Max: time.Hour}
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := retry(cctx, slow, func() error { return apierrors.NewInternalError(errors.New("x")) }, nil); !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled: %v after %s", err, time.Since(start))
	}
}
