package operator

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
)

func TestRestoreSource(t *testing.T) {
	ec := testCluster()
	if s, err := RestoreSource(ec, false); s != nil || err != nil {
		t.Fatalf("no restoreFrom: %+v, %v", s, err)
	}
	ec.Spec.RestoreFrom = &v1alpha1.RestoreFrom{Revision: 42, S3: &v1alpha1.S3{Endpoint: "https://s3.example:9000/", Bucket: "b", CredentialsSecret: "s3"}}
	s, err := RestoreSource(ec, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Endpoint != "https://s3.example:9000" || s.Bucket != "b" || s.Prefix != ec.Namespace+"/"+ec.Name ||
		s.CredentialsFile != restoreCredentialsFile || s.CAFile != restoreCAFile {
		t.Errorf("source %+v", s)
	}
	ec.Spec.RestoreFrom.S3.Prefix = "hosts/prod"
	if s, _ := RestoreSource(ec, false); s.Prefix != "hosts/prod" || s.CAFile != "" {
		t.Errorf("source %+v", s)
	}
	o := RestoreOptions(ec)
	if o.ToRevision != 42 || o.Backup != "latest" || !o.Force || !o.AllowOtherCluster || o.AllowUnauthenticated || o.BumpRevision != restore.DefaultBumpRevision {
		t.Errorf("options %+v", o)
	}
	ec.Spec.RestoreFrom = &v1alpha1.RestoreFrom{Volume: &v1alpha1.BackupVolume{}}
	if _, err := RestoreSource(ec, false); !errors.Is(err, ErrRestoreFailed) {
		t.Errorf("volume: %v", err)
	}
}

// A restore that failed: Ready False with reason RestoreFailed and the
// error, the other conditions Unknown, no member.
func TestStatusFromRestoreFailed(t *testing.T) {
	ec := testCluster()
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	st := StatusFrom(ec, v1alpha1.EtcdClusterStatus{}, Observed{StatusError: "restore from spec.restoreFrom failed: no full backup", StatusReason: "RestoreFailed",
		Volumes: metav1.Condition{Type: v1alpha1.ConditionDataVolumesReady, Status: metav1.ConditionTrue, Reason: "Bound"}}, t0)
	ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "RestoreFailed" || ready.Message != "restore from spec.restoreFrom failed: no full backup" {
		t.Errorf("Ready %+v", ready)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAllMembersReady); c == nil || c.Status != metav1.ConditionUnknown || c.Reason != "RestoreFailed" {
		t.Errorf("AllMembersReady %+v", c)
	}
	if len(st.Members) != 0 || st.ReadyReplicas != 0 {
		t.Errorf("members %+v", st.Members)
	}
}

// The cluster's own backup section survives an operator killed after the
// restore's commit saved the spec naming the source: the second attempt
// reads the first's.
func TestOwnBackupKept(t *testing.T) {
	dir := t.TempDir()
	own := spec.Backup{Continuous: true, S3: &spec.S3{Endpoint: "http://s3:9000", Bucket: "b", Prefix: "pods/db", CredentialsFile: s3CredentialsFile}}
	got, err := ownBackup(dir, own)
	if err != nil || !reflect.DeepEqual(got, own) {
		t.Fatalf("first: %+v, %v", got, err)
	}
	source := spec.Backup{S3: &spec.S3{Endpoint: "http://s3:9000", Bucket: "b", Prefix: "hosts/prod", CredentialsFile: restoreCredentialsFile}}
	got, err = ownBackup(dir, source)
	if err != nil || !reflect.DeepEqual(got, own) {
		t.Fatalf("after a killed attempt: %+v, %v; want %+v", got, err, own)
	}
	if fi, err := os.Stat(filepath.Join(dir, ownBackupFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v %v", ownBackupFile, fi, err)
	}
}
