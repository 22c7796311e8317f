package operator

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/spec"
)

func backupClaim(name string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes}}
}

// The claims a cluster's member pods can all mount read-write as a file
// system are taken; the others are refused naming the claim and what to
// give instead.
func TestCheckBackupClaim(t *testing.T) {
	block := backupClaim("b", corev1.ReadWriteMany)
	bm := corev1.PersistentVolumeBlock
	block.Spec.VolumeMode = &bm
	deleting := backupClaim("b", corev1.ReadWriteMany)
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		pods int
		want string // "" when taken
	}{
		{"rwx, 3 pods", backupClaim("b", corev1.ReadWriteMany), 3, ""},
		{"rwx and rwo, 5 pods", backupClaim("b", corev1.ReadWriteOnce, corev1.ReadWriteMany), 5, ""},
		{"rwo, 1 pod", backupClaim("b", corev1.ReadWriteOnce), 1, ""},
		{"rwop, 1 pod", backupClaim("b", corev1.ReadWriteOncePod), 1, ""},
		{"rwo, hibernated", backupClaim("b", corev1.ReadWriteOnce), 0, ""},
		{"missing", nil, 1, "there is no PersistentVolumeClaim b in the cluster's namespace: create it"},
		{"rwo, 3 pods", backupClaim("b", corev1.ReadWriteOnce), 3, "PersistentVolumeClaim b is [ReadWriteOnce], not ReadWriteMany: its volume attaches to one node, and every one of the 3 member pods mounts it"},
		{"rwop, 3 pods", backupClaim("b", corev1.ReadWriteOncePod), 3, "give a ReadWriteMany claim, or keep one member"},
		{"read-only", backupClaim("b", corev1.ReadOnlyMany), 1, "has access modes [ReadOnlyMany]: the members write backups to it"},
		{"block", block, 1, "is a block volume"},
		{"being deleted", deleting, 1, "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBackupClaim("b", tc.pvc, tc.pods)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrBackupVolume) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Every member pod mounts the claim at DIR/backups, inside the data
// volume's mount (after it); without backup.volume there is no such mount.
func TestStatefulSetBackupVolume(t *testing.T) {
	ec := testCluster()
	ec.Spec.Backup = &v1alpha1.Backup{Volume: &v1alpha1.BackupVolume{ClaimName: "etcd-backups"}}
	pod := StatefulSet(ec, PodOptions{Image: "i"}).Spec.Template.Spec
	ms := pod.Containers[0].VolumeMounts
	last := ms[len(ms)-1]
	if last.Name != BackupVolumeName || last.MountPath != "/var/lib/steward/backups" || last.ReadOnly || ms[0].MountPath != PodStewardDir {
		t.Errorf("mounts %+v", ms)
	}
	var found bool
	for _, v := range pod.Volumes {
		if v.Name == BackupVolumeName {
			found = v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "etcd-backups" && !v.PersistentVolumeClaim.ReadOnly
		}
	}
	if !found {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	// The init container makes the claim the members' user's: mounted
	// there too and named (a file system of its own is not walked into).
	prep := pod.InitContainers[0]
	im := prep.VolumeMounts[len(prep.VolumeMounts)-1]
	if im.Name != BackupVolumeName || im.MountPath != PodBackupDir || !slices.Contains(prep.Args, PodBackupDir) || !slices.Contains(prep.Args, PodStewardDir) {
		t.Errorf("init container mounts %+v, args %q", prep.VolumeMounts, prep.Args)
	}
	ec.Spec.Backup = &v1alpha1.Backup{S3: &v1alpha1.S3{Endpoint: "http://s3:1", Bucket: "b", CredentialsSecret: "s"}}
	for _, m := range StatefulSet(ec, PodOptions{Image: "i"}).Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == BackupVolumeName {
			t.Errorf("S3 backups mount a claim: %+v", m)
		}
	}
}

// The Steward spec of a volume store: the default store (DIR/backups) on
// every host, declared shared, continuous, with the resource's schedule
// and retention, and never automatic recovery.
func TestShapeBackupVolume(t *testing.T) {
	ec := testCluster()
	one := int32(2)
	ec.Spec.Backup = &v1alpha1.Backup{Volume: &v1alpha1.BackupVolume{ClaimName: "b"}, FullSchedule: "*/5 * * * *", DeltaMaxAgeMs: 100,
		Retention: v1alpha1.Retention{KeepLast: 4, KeepHourly: &one, KeepDaily: &one}}
	ec.Spec.Recovery = v1alpha1.Recovery{Mode: "auto"}
	s := &spec.Cluster{}
	Shape(s, ec)
	b := s.Backup
	if b.S3 != nil || b.Store != "" || !b.StoreShared || !b.Continuous || b.FullSchedule != "*/5 * * * *" || b.DeltaMaxAgeMs != 100 || b.Retention.KeepLast != 4 {
		t.Errorf("backup %+v", b)
	}
	if s.Recovery.Mode != "manual" {
		t.Errorf("recovery mode %q with a volume store the operator cannot read", s.Recovery.Mode)
	}
}

// A ReadWriteOnce claim for three members is refused before anything is
// written (Ready False, reason BackupVolumeRefused; no spec, no
// StatefulSet); a missing claim likewise. One member on it is made: the
// spec's store is the shared DIR/backups, the pods mount the claim.
func TestReconcileBackupVolume(t *testing.T) {
	ec := testCluster()
	ec.Spec.Backup = &v1alpha1.Backup{Volume: &v1alpha1.BackupVolume{ClaimName: "etcd-backups"}}
	ec.Spec.Recovery.Mode = "manual"
	refused := func(t *testing.T, r *Reconciler, cl client.Client, want string) {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.EtcdCluster
		_ = cl.Get(t.Context(), req.NamespacedName, &got)
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonBackupVolumeRefused || !strings.Contains(c.Message, want) {
			t.Errorf("Ready %+v", c)
		}
		if _, err := os.Stat(filepath.Join(StateDir(r.Config.StateDir, ec), spec.FileName)); err == nil {
			t.Error("a cluster was written for a refused claim")
		}
		var ss appsv1.StatefulSet
		if err := cl.Get(t.Context(), req.NamespacedName, &ss); err == nil {
			t.Error("a StatefulSet was made for a refused claim")
		}
	}
	t.Run("missing", func(t *testing.T) {
		r, cl := newReconciler(t, ec.DeepCopy())
		refused(t, r, cl, "there is no PersistentVolumeClaim etcd-backups")
	})
	t.Run("rwo for 3", func(t *testing.T) {
		r, cl := newReconciler(t, ec.DeepCopy(), backupClaim("etcd-backups", corev1.ReadWriteOnce))
		refused(t, r, cl, "not ReadWriteMany")
	})
	t.Run("rwo for 1", func(t *testing.T) {
		one := ec.DeepCopy()
		one.Spec.Replicas = 1
		r, cl := newReconciler(t, one, backupClaim("etcd-backups", corev1.ReadWriteOnce))
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		s, err := spec.Load(filepath.Join(StateDir(r.Config.StateDir, one), spec.FileName))
		if err != nil {
			t.Fatal(err)
		}
		if b := s.Backup; b.S3 != nil || b.Store != "" || !b.StoreShared || !b.Continuous || s.Recovery.Mode != "manual" {
			t.Errorf("spec backup %+v recovery %+v", b, s.Recovery)
		}
		var ss appsv1.StatefulSet
		if err := cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db"}, &ss); err != nil {
			t.Fatal(err)
		}
		var mounted bool
		for _, v := range ss.Spec.Template.Spec.Volumes {
			mounted = mounted || (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "etcd-backups")
		}
		if !mounted {
			t.Errorf("the member pods do not mount the claim: %+v", ss.Spec.Template.Spec.Volumes)
		}

		// Scaling to 3 on that claim is refused, the StatefulSet kept.
		var got v1alpha1.EtcdCluster
		_ = cl.Get(t.Context(), req.NamespacedName, &got)
		got.Spec.Replicas = 3
		if err := cl.Update(t.Context(), &got); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		_ = cl.Get(t.Context(), req.NamespacedName, &got)
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != ReasonBackupVolumeRefused {
			t.Errorf("Ready after scaling on a ReadWriteOnce claim %+v", c)
		}
		_ = cl.Get(t.Context(), types.NamespacedName{Namespace: "prod", Name: "db"}, &ss)
		if *ss.Spec.Replicas != 1 {
			t.Errorf("StatefulSet replicas %d", *ss.Spec.Replicas)
		}
	})
}
