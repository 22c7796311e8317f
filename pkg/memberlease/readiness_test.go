package memberlease

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMemberReadiness(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	created := now.Add(-time.Hour)
	lease := func(holder string, renewedAgo time.Duration, seconds int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
		if seconds >= 0 {
			l.Spec.LeaseDurationSeconds = &seconds
		}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if renewedAgo >= 0 {
			rt := metav1.NewMicroTime(now.Add(-renewedAgo))
			l.Spec.RenewTime = &rt
		}
		return l
	}
	const grace = time.Minute
	for _, tc := range []struct {
		name     string
		podReady bool
		lease    *coordinationv1.Lease
		want     Readiness
	}{
		{"renewed leader", true, lease("272e204152:Leader", 5*time.Second, 15),
			Readiness{Ready: true, Status: StatusReady, Reason: ReasonLeaseSucceeded, ID: "272e204152", Role: RoleLeader}},
		{"renewed member", true, lease("272e204153:Member", 14*time.Second, 15),
			Readiness{Ready: true, Status: StatusReady, Reason: ReasonLeaseSucceeded, ID: "272e204153", Role: RoleMember}},
		{"expires at renewTime+duration exactly", true, lease("272e204153:Member", 15*time.Second, 15),
			Readiness{Status: StatusUnknown, Reason: ReasonLeaseExpired, ID: "272e204153", Role: RoleMember}},
		{"expired within the grace: Unknown, id kept", true, lease("272e204153:Member", 15*time.Second+grace, 15),
			Readiness{Status: StatusUnknown, Reason: ReasonLeaseExpired, ID: "272e204153", Role: RoleMember}},
		{"expired beyond the grace", true, lease("272e204153:Member", 15*time.Second+grace+time.Millisecond, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonUnknownGracePeriodExceeded, ID: "272e204153", Role: RoleMember}},
		{"pod not ready, lease renewed", false, lease("272e204152:Leader", time.Second, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonPodNotReady, ID: "272e204152", Role: RoleLeader}},
		{"pod not ready, lease long expired", false, lease("272e204152:Leader", time.Hour, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonPodNotReady, ID: "272e204152", Role: RoleLeader}},
		{"pod not ready, no lease", false, nil,
			Readiness{Status: StatusNotReady, Reason: ReasonPodNotReady}},
		{"never renewed: expired since creation", true, lease("", -1, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonUnknownGracePeriodExceeded}},
		{"never renewed, created just now", true, func() *coordinationv1.Lease {
			l := lease("", -1, 15)
			l.CreationTimestamp = metav1.NewTime(now.Add(-time.Second))
			return l
		}(), Readiness{Status: StatusUnknown, Reason: ReasonLeaseExpired}},
		{"holder that does not parse is no renewal", true, lease("272e204152:Learner", time.Second, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonUnknownGracePeriodExceeded}},
		{"renewTime without holder is no renewal", true, lease("", time.Second, 15),
			Readiness{Status: StatusNotReady, Reason: ReasonUnknownGracePeriodExceeded}},
		{"no duration: expired at its renewal", true, lease("272e204152:Leader", time.Second, -1),
			Readiness{Status: StatusUnknown, Reason: ReasonLeaseExpired, ID: "272e204152", Role: RoleLeader}},
		{"no lease: Unknown", true, nil,
			Readiness{Status: StatusUnknown, Reason: ReasonLeaseExpired}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MemberReadiness(tc.podReady, tc.lease, now, grace); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	d := func(s int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &s}}
	}
	for _, tc := range []struct {
		l    *coordinationv1.Lease
		want time.Duration
	}{
		{d(15), 5 * time.Second},
		{d(40), 40 * time.Second / 3},
		{d(0), DefaultInterval},
		{d(-3), DefaultInterval},
		{&coordinationv1.Lease{}, DefaultInterval},
	} {
		if got := Interval(tc.l); got != tc.want {
			t.Errorf("Interval(%v) = %s, want %s", tc.l.Spec.LeaseDurationSeconds, got, tc.want)
		}
	}
}
