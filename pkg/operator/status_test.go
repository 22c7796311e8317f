package operator

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/status"
)

func threeMembers() *status.Status {
	return &status.Status{
		Cluster: status.ClusterStatus{ID: "cdf818194e3a8c32", Leader: "db-1", Quorate: true, VotingMembers: 3, HealthyMembers: 3},
		Members: []status.MemberStatus{
			{Name: "db-0", ID: "8e9e05c52164694d", Role: "follower", Healthy: true, Version: "3.6.16"},
			{Name: "db-1", ID: "91bc3c398fb3c146", Role: "leader", Healthy: true, Version: "3.6.16"},
			{Name: "db-2", ID: "fd422379fda50e48", Role: "follower", Healthy: true, Version: "3.6.16"},
		},
		Conditions: []status.Condition{
			{Type: "Ready", Status: "True", Reason: "Quorate", Message: "3 of 3 voting members healthy; quorum is 2"},
			{Type: "AllMembersReady", Status: "True", Reason: "AllMembersReady", Message: "all 3 members healthy"},
			{Type: "BackupReady", Status: "Unknown", Reason: "NoBackups", Message: "no backup has been taken for this cluster"},
			{Type: "UpgradeInProgress", Status: "False", Reason: "NoPlan", Message: "no upgrade or rollback plan"},
			{Type: "CertificatesReady", Status: "True", Reason: "Valid", Message: "ok"},
			{Type: "CertificateRenewal", Status: "True", Reason: "Running", Message: "not an EtcdCluster condition"},
		},
	}
}

func TestStatusFrom(t *testing.T) {
	ec := testCluster()
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	vols := VolumesCondition([]ClaimState{{Name: "data-db-0", Bound: true}, {Name: "data-db-1", Bound: true}, {Name: "data-db-2", Bound: true}})
	st := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: threeMembers(), Volumes: vols, LastBackup: t0}, t0)
	if st.ObservedGeneration != 2 || st.Replicas != 3 || st.ReadyReplicas != 3 || st.ReadyReplicasText != "3/3" ||
		st.Leader != "db-1" || st.ClusterID != "cdf818194e3a8c32" || st.Version != "3.6.16" || st.Selector != Selector(ec) {
		t.Errorf("status %+v", st)
	}
	if st.LastBackupTime == nil || !st.LastBackupTime.Time.Equal(t0) {
		t.Errorf("last backup %v", st.LastBackupTime)
	}
	for typ, want := range map[string]metav1.ConditionStatus{"Ready": "True", "AllMembersReady": "True", "BackupReady": "Unknown",
		"UpgradeInProgress": "False", "CertificatesReady": "True", "DataVolumesReady": "True"} {
		c := meta.FindStatusCondition(st.Conditions, typ)
		if c == nil || c.Status != want || c.ObservedGeneration != 2 || c.Reason == "" {
			t.Errorf("condition %s: %+v, want %s", typ, c, want)
		}
	}
	if len(st.Conditions) != 6 {
		t.Errorf("conditions %d, want the 6 of the API: %+v", len(st.Conditions), st.Conditions)
	}
	roles := map[string]string{}
	for _, m := range st.Members {
		roles[m.Name] = m.Role
		if !m.Ready || m.Reason != "Healthy" || m.ID == "" || m.LastTransitionTime == nil || !m.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("member %+v", m)
		}
	}
	if roles["db-0"] != "Member" || roles["db-1"] != "Leader" || roles["db-2"] != "Member" {
		t.Errorf("roles %v", roles)
	}

	// Later: db-2 is down and db-0 a learner; db-1's transition time
	// stays, the others' move; the Ready condition's time stays too.
	t1 := t0.Add(time.Minute)
	later := threeMembers()
	later.Members[2].Healthy = false
	later.Members[0].Role = "learner"
	later.Cluster.VotingMembers = 2
	later.Conditions[1] = status.Condition{Type: "AllMembersReady", Status: "False", Reason: "NotAllMembersReady", Message: "db-2 down"}
	st2 := StatusFrom(ec, st, Observed{Status: later, Volumes: vols}, t1)
	if st2.Replicas != 2 || st2.ReadyReplicas != 1 || st2.ReadyReplicasText != "1/3" {
		t.Errorf("replicas %d ready %d %q", st2.Replicas, st2.ReadyReplicas, st2.ReadyReplicasText)
	}
	for _, m := range st2.Members {
		switch m.Name {
		case "db-0":
			if m.Ready || m.Role != "Learner" || m.Reason != "Learner" || !m.LastTransitionTime.Time.Equal(t1) {
				t.Errorf("learner %+v", m)
			}
		case "db-1":
			if !m.Ready || !m.LastTransitionTime.Time.Equal(t0) {
				t.Errorf("leader %+v", m)
			}
		case "db-2":
			if m.Ready || m.Reason != "Unhealthy" || !m.LastTransitionTime.Time.Equal(t1) {
				t.Errorf("down %+v", m)
			}
		}
	}
	if c := meta.FindStatusCondition(st2.Conditions, "Ready"); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready moved: %v", c.LastTransitionTime)
	}
	if c := meta.FindStatusCondition(st2.Conditions, "AllMembersReady"); c.Status != "False" || !c.LastTransitionTime.Time.Equal(t1) {
		t.Errorf("AllMembersReady %+v", c)
	}
	if st2.LastBackupTime == nil || !st2.LastBackupTime.Time.Equal(t0) {
		t.Error("the last backup time was lost when none was observed")
	}
}

// Status unreadable: every condition Unknown with the reason, the
// members kept as they were.
func TestStatusFromUnknown(t *testing.T) {
	ec := testCluster()
	prev := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{Status: threeMembers(), Volumes: VolumesCondition(nil)}, time.Now())
	st := StatusFrom(ec, prev, Observed{StatusError: "no member answers", Volumes: VolumesCondition([]ClaimState{{Name: "data-db-0", Missing: true}})}, time.Now())
	if c := meta.FindStatusCondition(st.Conditions, "Ready"); c.Status != "Unknown" || c.Reason != "StatusUnknown" || c.Message != "the cluster's status could not be read: no member answers" {
		t.Errorf("Ready %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, "DataVolumesReady"); c.Status != "False" || c.Reason != "VolumesNotBound" {
		t.Errorf("DataVolumesReady %+v", c)
	}
	if len(st.Members) != 3 || st.ReadyReplicas != 0 || st.ReadyReplicasText != "0/3" {
		t.Errorf("members %d ready %d", len(st.Members), st.ReadyReplicas)
	}
}

func TestReason(t *testing.T) {
	for in, want := range map[string]string{"Quorate": "Quorate", "Not ready": "Unknown", "": "Unknown", "A_b:c,d": "A_b:c,d", "9x": "Unknown"} {
		if got := reason(in); got != want {
			t.Errorf("reason(%q) = %q, want %q", in, got, want)
		}
	}
}
