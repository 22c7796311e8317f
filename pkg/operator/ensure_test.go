package operator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/atomicfile"
)

// A new EtcdCluster whose backup claim is refused changes nothing: the
// Steward directory a deleted resource of its name left stays where it
// is (claimDir moves it aside only once the new resource is accepted).
func TestBackupVolumeRefusedBeforeClaimDir(t *testing.T) {
	ec := testCluster()
	ec.Spec.Backup = &v1alpha1.Backup{Volume: &v1alpha1.BackupVolume{ClaimName: "missing"}}
	r, _ := newReconciler(t, ec)
	dir := StateDir(r.Config.StateDir, ec)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, uidFile), []byte("uid-old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := r.ensure(t.Context(), ec)
	if err == nil || !strings.Contains(err.Error(), "there is no PersistentVolumeClaim missing") {
		t.Fatalf("ensure: %v, want the claim refused", err)
	}
	if owner := dirOwner(dir); owner != "uid-old" {
		t.Errorf("the deleted resource's directory now belongs to %q", owner)
	}
	if _, err := os.Stat(dir + ".uid-old"); !os.IsNotExist(err) {
		t.Errorf("moved aside before the refusal: %v", err)
	}
}

// One reader writes the S3 Secrets of the backup store and of a restore
// source; each refusal names the resource's field, the Secret, and writes
// nothing.
func TestWriteS3SecretsNamesTheField(t *testing.T) {
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: "prod"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK"), "AWS_SECRET_ACCESS_KEY": []byte("SK")}}
	noKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "half", Namespace: "prod"},
		Data: map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("AK")}}
	emptyCA := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "prod"}, Data: map[string][]byte{"tls.crt": []byte("x")}}
	for _, tc := range []struct {
		name, field string
		s3          v1alpha1.S3
		want        string
	}{
		{"no credentials Secret", "spec.backup.s3", v1alpha1.S3{CredentialsSecret: "gone"}, `spec.backup.s3.credentialsSecret gone: secrets "gone" not found`},
		{"credentials without a key", "spec.restoreFrom.s3", v1alpha1.S3{CredentialsSecret: "half"}, "spec.restoreFrom.s3: a Secret the EtcdCluster names is missing keys: Secret half needs the keys AWS_SECRET_ACCESS_KEY (one line each)"},
		{"no CA Secret", "spec.restoreFrom.s3", v1alpha1.S3{CredentialsSecret: "s3", CASecret: "gone"}, `spec.restoreFrom.s3.caSecret gone: secrets "gone" not found`},
		{"CA Secret without ca.crt", "spec.backup.s3", v1alpha1.S3{CredentialsSecret: "s3", CASecret: "ca"}, "spec.backup.s3.caSecret: a Secret the EtcdCluster names is missing keys: Secret ca needs the key ca.crt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newReconciler(t, creds, noKey, emptyCA)
			dir := t.TempDir()
			_, err := r.writeS3Secrets(t.Context(), "prod", tc.field, &tc.s3, dir, "creds", "ca.crt")
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err %v\nwant %s", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "ca.crt")); !os.IsNotExist(err) {
				t.Errorf("a CA file written: %v", err)
			}
		})
	}
}
