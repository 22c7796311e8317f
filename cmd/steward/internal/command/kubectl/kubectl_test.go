package kubectl

import (
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/operator"
)

func TestStatusTable(t *testing.T) {
	now := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	v := &operator.View{Namespace: "prod", Name: "db", Replicas: 3, ReadyReplicas: 3, Version: "3.6.16", ClusterID: "cdf818194e3a8c32", Leader: "db-1",
		RestoredFrom:  "s3://b/hosts/prod at http://s3:9000",
		Members:       []v1alpha1.MemberStatus{{Name: "db-0", ID: "8e9e05c52164694d", Role: "Member", Ready: true, Version: "3.6.16"}},
		Conditions:    []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Quorate", Message: "3 of 3", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}},
		LastOperation: &v1alpha1.Operation{Type: "Restore", State: "Succeeded", Description: "restored"},
		Backups:       &operator.BackupsView{Store: "s3://b/prod/db at http://s3:9000", Backups: []backup.Manifest{{ID: "f1", EndRevision: 1000000200, CreatedAt: now.Add(-2 * time.Second)}}},
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	StatusTable(tw, v, now)
	tw.Flush()
	out := b.String()
	for _, want := range []string{"EtcdCluster prod/db: 3/3 ready, etcd 3.6.16, cluster cdf818194e3a8c32, leader db-1",
		"restored from s3://b/hosts/prod", "db-0    8e9e05c52164694d  Member  true", "Ready      True    Quorate  1m0s",
		"last operation: Restore Succeeded: restored", "backups: 1 in s3://b/prod/db at http://s3:9000, newest f1 (revision 1000000200, 2s ago)"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
