package memberlease

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
)

// State is what a Renewer's health function says of its member.
type State struct {
	// Healthy: the member is started, a voting member (not a learner) of
	// its cluster and healthy (it knows a leader and reports no error).
	// Only then is the lease renewed.
	Healthy bool
	// Holder is the member's ID and role, set when Healthy.
	Holder Holder
	// Why says what is wrong when not Healthy (logged on a change).
	Why string
}

// HealthFunc says whether the member is healthy for its lease. It must
// return within ctx.
type HealthFunc func(ctx context.Context) State

// Defaults of a Renewer.
const (
	// DefaultInterval is the renewal interval until the lease has been
	// read (then it is leaseDurationSeconds/3).
	DefaultInterval = 5 * time.Second
	// minInterval bounds the interval of a lease with a tiny duration.
	minInterval = 200 * time.Millisecond
	// callTimeout bounds one health check, and one renewal with its
	// conflict retries.
	callTimeout = 10 * time.Second
	// retryAfter bounds the wait after a failed renewal (a lease not
	// created yet, an API server away).
	retryAfter = 2 * time.Second
)

// Renewer renews one member's lease while its member is healthy.
//
// Its fields are set before Run and never change; Run is its only
// goroutine (it holds its state in local variables).
type Renewer struct {
	// Leases reaches the API server (kubernetes.Interface.CoordinationV1()).
	Leases coordinationclient.LeasesGetter
	Lease  Ref
	Health HealthFunc
	Log    *slog.Logger
	// Now is the clock of renewTime (default time.Now).
	Now func() time.Time
}

// Run renews the lease every leaseDurationSeconds/3 (read again at each
// renewal: the operator may change it) while Health says the member is
// healthy, and leaves it alone otherwise, so that it expires. It returns
// when ctx ends. Nothing is fatal: a lease that does not exist yet (the
// operator creates it), an API server that does not answer, a refused
// update are logged (once per change of what is wrong) and tried again at
// the next turn; an update that conflicts with another writer's
// (resourceVersion) is retried at once on a fresh read.
func (r *Renewer) Run(ctx context.Context) {
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("lease", r.Lease.String())
	interval := DefaultInterval
	last := "" // what the previous turn logged: a change is logged once
	say := func(level slog.Level, msg string, args ...any) {
		key := fmt.Sprint(append([]any{msg}, args...)...)
		if key != last {
			log.Log(ctx, level, msg, args...)
			last = key
		}
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, callTimeout)
		st := r.Health(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		next := interval
		if !st.Healthy {
			say(slog.LevelInfo, "member not healthy: lease not renewed (it expires)", "why", st.Why)
		} else if d, err := r.renew(ctx, st.Holder); err != nil {
			next = min(interval, retryAfter)
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsNotFound(err) {
				say(slog.LevelWarn, "lease not found: the operator creates it; trying again", "err", err)
			} else {
				say(slog.LevelWarn, "lease renewal failed; trying again", "err", err)
			}
		} else {
			interval, next = d, d
			say(slog.LevelInfo, "renewing lease", "holder", st.Holder.String(), "interval", d)
		}
		t.Reset(next)
	}
}

// renew writes the holder and renewTime into the lease, read fresh for
// each try (conflicts retried), and returns the next interval.
func (r *Renewer) renew(ctx context.Context, h Holder) (time.Duration, error) {
	if h.ID == 0 || (h.Role != RoleLeader && h.Role != RoleMember) {
		return 0, fmt.Errorf("refusing to write holder %q: a member ID and Leader or Member are required", h.String())
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	holder := h.String()
	var interval time.Duration
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := r.Leases.Leases(r.Lease.Namespace).Get(ctx, r.Lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		interval = Interval(l)
		t := metav1.NewMicroTime(now())
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
			l.Spec.HolderIdentity = &holder
			l.Spec.AcquireTime = &t
			n := int32(1)
			if l.Spec.LeaseTransitions != nil {
				n = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &n
		}
		l.Spec.RenewTime = &t
		_, err = r.Leases.Leases(r.Lease.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return 0, err
	}
	return interval, nil
}

// Interval is how often a lease is renewed: a third of its duration (at
// least 200 ms), or DefaultInterval for a lease without one.
func Interval(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return DefaultInterval
	}
	return max(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second/3, minInterval)
}
