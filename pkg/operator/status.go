package operator

import (
	"fmt"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/status"
)

// conditionTypes are the conditions an EtcdCluster reports, in order:
// Steward's status conditions of these types, and DataVolumesReady from
// the members' claims.
var conditionTypes = []string{
	v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady,
	v1alpha1.ConditionUpgradeInProgress, v1alpha1.ConditionCertificatesReady,
}

// Observed is what one reconcile saw of a cluster, turned into the
// resource's status by StatusFrom.
type Observed struct {
	// Status is pkg/status's report (the same as `steward status`); nil
	// when it could not be read (StatusError says why).
	Status      *status.Status
	StatusError string
	// StatusReason is the conditions' reason while Status is nil
	// (default StatusUnknown; RestoreFailed: spec.restoreFrom's backup
	// could not be read or verified, and no member started).
	StatusReason string
	// Volumes is DataVolumesReady (VolumesCondition).
	Volumes metav1.Condition
	// LastBackup is the newest backup upload (zero: none known).
	LastBackup time.Time
	// Operation is the newest operation, if any.
	Operation *v1alpha1.Operation
	// QuorumLostAdvice is added to the Ready condition's message while
	// quorum is lost (ManualRecoveryAdvice; empty in mode auto).
	QuorumLostAdvice string
	// Upgrade, when set, is UpgradeInProgress in place of the status's
	// (a refused spec.version: upgrade.go).
	Upgrade *metav1.Condition
	// Scaled is the Scaled condition (scale.go), nil: not reported.
	Scaled *metav1.Condition
	// ClientCert is what CertificatesReady adds about NAME-client-tls
	// (clientCertNote: when it expires and is renewed), "" for nothing.
	ClientCert string
	// Hibernated: no member runs (spec.replicas 0, scale.go); the
	// conditions say Hibernated and the members are those of before.
	Hibernated bool
}

// StatusFrom computes the resource's status from what was observed.
// prev is the status so far: transition times carry over while a
// condition's status (a member's readiness) does not change.
func StatusFrom(ec *v1alpha1.EtcdCluster, prev v1alpha1.EtcdClusterStatus, o Observed, now time.Time) v1alpha1.EtcdClusterStatus {
	out := v1alpha1.EtcdClusterStatus{
		ObservedGeneration: ec.Generation,
		Selector:           Selector(ec),
		Conditions:         append([]metav1.Condition(nil), prev.Conditions...),
		LastOperation:      prev.LastOperation,
		LastBackupTime:     prev.LastBackupTime,
	}
	if o.Operation != nil {
		out.LastOperation = o.Operation
	}
	if !o.LastBackup.IsZero() {
		t := metav1.NewTime(o.LastBackup)
		out.LastBackupTime = &t
	}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = ec.Generation
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&out.Conditions, c)
	}
	if o.Scaled != nil {
		set(*o.Scaled)
	}
	st := o.Status
	if o.Hibernated {
		msg := "hibernated (spec.replicas 0): no member runs; volumes and backups are kept"
		for _, t := range conditionTypes {
			set(metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: "Hibernated", Message: msg})
		}
		set(o.Volumes)
		for _, m := range prev.Members {
			m.Ready, m.Reason = false, "Hibernated"
			out.Members = append(out.Members, m)
		}
		out.Replicas, out.ReadyReplicas = 0, 0
		out.ReadyReplicasText = "0/0"
		return out
	}
	if st == nil {
		msg := "the cluster's status could not be read: " + o.StatusError
		reason := "StatusUnknown"
		if o.StatusReason != "" {
			reason = o.StatusReason
		}
		for _, t := range conditionTypes {
			set(metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: reason, Message: msg})
		}
		if o.StatusReason != "" {
			set(metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: o.StatusError})
		}
		set(o.Volumes)
		out.Members = prev.Members
		out.Replicas, out.ReadyReplicas = prev.Replicas, 0
		out.ReadyReplicasText = fmt.Sprintf("0/%d", ec.Spec.Replicas)
		return out
	}
	for _, t := range conditionTypes {
		c, ok := st.Condition(t)
		if !ok {
			set(metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: "NotReported", Message: "the cluster status did not report it"})
			continue
		}
		msg := c.Message
		if t == v1alpha1.ConditionReady && c.Reason == "QuorumLost" {
			msg += o.QuorumLostAdvice
		}
		if t == v1alpha1.ConditionCertificatesReady && o.ClientCert != "" {
			msg += "; " + o.ClientCert
		}
		set(metav1.Condition{Type: t, Status: metav1.ConditionStatus(c.Status), Reason: reason(c.Reason), Message: msg})
	}
	set(o.Volumes)
	if o.Upgrade != nil {
		set(*o.Upgrade)
	}

	prevMember := map[string]v1alpha1.MemberStatus{}
	for _, m := range prev.Members {
		prevMember[m.Name] = m
	}
	versions := map[string]bool{}
	for _, m := range st.Members {
		ms := v1alpha1.MemberStatus{Name: m.Name, ID: m.ID, Version: m.Version}
		switch m.Role {
		case "leader":
			ms.Role = "Leader"
			out.Leader = m.Name
		case "follower":
			ms.Role = "Member"
		case "learner":
			ms.Role = "Learner"
		}
		switch {
		case !m.Healthy:
			ms.Reason = "Unhealthy"
		case m.Role == "learner":
			ms.Reason = "Learner"
		default:
			ms.Ready, ms.Reason = true, "Healthy"
		}
		if ms.Ready {
			out.ReadyReplicas++
		}
		// A member whose version is not known (stopped, or restarting
		// on another version mid-upgrade) counts as a version of its
		// own: status.version only when every member reports the same.
		versions[m.Version] = true
		t := metav1.NewTime(now)
		if p, ok := prevMember[m.Name]; ok && p.Ready == ms.Ready && p.LastTransitionTime != nil {
			t = *p.LastTransitionTime
		}
		ms.LastTransitionTime = &t
		out.Members = append(out.Members, ms)
	}
	if len(versions) == 1 && !versions[""] {
		for v := range versions {
			out.Version = v
		}
	}
	out.Replicas = int32(st.Cluster.VotingMembers)
	out.ClusterID = st.Cluster.ID
	out.ReadyReplicasText = fmt.Sprintf("%d/%d", out.ReadyReplicas, ec.Spec.Replicas)
	return out
}

// reasonRE is the shape Kubernetes requires of a condition's reason.
var reasonRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// reason returns r when Kubernetes accepts it as a reason, else "Unknown".
func reason(r string) string {
	if reasonRE.MatchString(r) {
		return r
	}
	return "Unknown"
}

// ClaimState is one member claim as the reconciler found it.
type ClaimState struct {
	Name  string
	Bound bool
	// Missing: no claim of that name (its pod was not created yet).
	Missing bool
}

// VolumesCondition is DataVolumesReady: every member's claim exists and
// is bound.
func VolumesCondition(claims []ClaimState) metav1.Condition {
	var waiting []string
	for _, c := range claims {
		switch {
		case c.Missing:
			waiting = append(waiting, c.Name+" (not created yet)")
		case !c.Bound:
			waiting = append(waiting, c.Name+" (not bound)")
		}
	}
	if len(waiting) > 0 {
		return metav1.Condition{Type: v1alpha1.ConditionDataVolumesReady, Status: metav1.ConditionFalse, Reason: "VolumesNotBound",
			Message: fmt.Sprintf("claims not ready: %v", waiting)}
	}
	return metav1.Condition{Type: v1alpha1.ConditionDataVolumesReady, Status: metav1.ConditionTrue, Reason: "VolumesBound",
		Message: fmt.Sprintf("all %d member claims bound", len(claims))}
}
