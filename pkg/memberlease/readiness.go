package memberlease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Reasons of a member's readiness (DEP-01's status.members[].reason).
const (
	// ReasonLeaseSucceeded: the pod is ready and its lease is renewed.
	ReasonLeaseSucceeded = "LeaseSucceeded"
	// ReasonLeaseExpired: the pod is ready but its lease expired (or was
	// never renewed) less than the unknown grace period ago: Unknown.
	ReasonLeaseExpired = "LeaseExpired"
	// ReasonPodNotReady: the pod is not ready (whatever the lease says).
	ReasonPodNotReady = "PodNotReady"
	// ReasonUnknownGracePeriodExceeded: the lease expired longer than the
	// unknown grace period ago: NotReady.
	ReasonUnknownGracePeriodExceeded = "UnknownGracePeriodExceeded"
)

// Status of a member's readiness, DEP-01's Ready|NotReady|Unknown.
const (
	StatusReady    = "Ready"
	StatusNotReady = "NotReady"
	StatusUnknown  = "Unknown"
)

// Readiness is one member's readiness as DEP-01 decides it.
type Readiness struct {
	Ready bool
	// Status is Ready, NotReady or Unknown (an expired lease within the
	// grace period: the member may be fine and its agent unable to reach
	// the API server).
	Status string
	Reason string
	// ID and Role are the lease's holderIdentity ("" when it holds none,
	// or none that parses), kept for an expired lease too: DEP-01 fills a
	// member's id from its lease whatever its readiness.
	ID   string
	Role Role
}

// MemberReadiness decides a member's readiness from its pod's readiness,
// its lease (nil: none) and the time now, with unknownGrace the time an
// expired lease is Unknown before the member is NotReady (DEP-01's tables
// 2, 7 and 8):
//
//   - pod not ready: NotReady, PodNotReady (it says more than the lease);
//   - lease renewed with a good holder and not expired (renewTime +
//     leaseDurationSeconds after now): Ready, LeaseSucceeded;
//   - else the lease expired at renewTime + leaseDurationSeconds (a lease
//     never renewed, or whose holder does not parse, counts as renewed at
//     its creation: the operator made it, no agent renewed it); no lease
//     counts as one expired at now: Unknown, LeaseExpired until
//     unknownGrace has passed since the expiry, then NotReady,
//     UnknownGracePeriodExceeded.
//
// renewTime is the agent's clock and now the caller's: clocks apart by
// more than a lease's duration read a renewed lease as expired (or the
// reverse), as in every use of Kubernetes leases.
func MemberReadiness(podReady bool, lease *coordinationv1.Lease, now time.Time, unknownGrace time.Duration) Readiness {
	var r Readiness
	var h Holder
	var holderErr error = ErrNoHolder
	if lease != nil && lease.Spec.HolderIdentity != nil {
		h, holderErr = ParseHolder(*lease.Spec.HolderIdentity)
		if holderErr == nil {
			r.ID, r.Role = h.IDHex(), h.Role
		}
	}
	if !podReady {
		r.Status, r.Reason = StatusNotReady, ReasonPodNotReady
		return r
	}
	expiry := now
	if lease != nil {
		d := time.Duration(0)
		if lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
			d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
		}
		renewed := lease.CreationTimestamp.Time
		if holderErr == nil && lease.Spec.RenewTime != nil {
			renewed = lease.Spec.RenewTime.Time
		}
		expiry = renewed.Add(d)
		if holderErr == nil && lease.Spec.RenewTime != nil && now.Before(expiry) {
			r.Ready, r.Status, r.Reason = true, StatusReady, ReasonLeaseSucceeded
			return r
		}
	}
	if now.Sub(expiry) > unknownGrace {
		r.Status, r.Reason = StatusNotReady, ReasonUnknownGracePeriodExceeded
		return r
	}
	r.Status, r.Reason = StatusUnknown, ReasonLeaseExpired
	return r
}
