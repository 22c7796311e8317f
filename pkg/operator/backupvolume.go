package operator

// spec.backup.volume: continuous backups on a PersistentVolumeClaim
// instead of S3 (docs/operator.md, "Backups on a volume").
//
// The store is the hosts' shared directory store (backup.store with
// backup.storeShared: docs/hosts.md, Backups across hosts): every member
// pod mounts the claim at PodBackupDir, which is the Steward spec's
// default store (DIR/backups) in the pod's directory, and the agent whose
// member leads records there, one at a time by the backup election in
// etcd, in Steward's usual local-directory layout. When leadership moves,
// the new leader's agent continues in the same directory, on the same
// claim.
//
// Why the claim is mounted by every member pod, and not by the recorder
// alone or by a backup pod of its own: the recorder is whichever member
// leads, and it moves; a pod's volumes are fixed when the pod is made.
// A dedicated pod holding the claim that the recorder streams to needs a
// store protocol between pods (an S3-compatible server, or an agent API
// for objects) that Steward does not have yet. So the claim must reach
// every member pod: ReadWriteMany, or ReadWriteOnce for a cluster of one
// member pod (a ReadWriteOnce volume attaches to one node; with node-local
// volumes every pod mounting it would be pinned to that node, with network
// disks the pods of other nodes would never start). CheckBackupClaim
// refuses the rest, before anything is made and before a scale-up.
//
// What the operator itself cannot do with such a store: it runs in its own
// pod and namespace and cannot mount the claim, so the coordinator's view
// of the store (DIR/backups in its state directory) is not the pods'. So
// automatic quorum-loss recovery, which restores from the newest backup,
// is refused at admission for a volume store (recovery.mode must be
// manual), a pre-upgrade backup of a version plan goes to the operator's
// state directory as it does for a cluster without backups, and
// `kubectl steward backups` cannot list it.
//
// Invariants:
//   - the claim is never created, resized or deleted by the operator: the
//     backups outlive the EtcdCluster, as its data claims do;
//   - a claim that is missing, read-only, a block device, or ReadWriteOnce
//     for more than one member pod is refused (Ready False, reason
//     BackupVolumeRefused, Event), with nothing written (no Steward
//     directory spec, no object) and no scale step taken;
//   - backup.volume cannot be added, changed or removed once the resource
//     exists (the API's CEL rule), so the pods' mounts and the Steward
//     spec's store never disagree.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

const (
	// BackupVolumeName is the member pods' volume of the backup claim.
	BackupVolumeName = "backups"
	// PodBackupDir is where member pods mount the backup claim: the
	// default backup store (DIR/backups) of the agent's directory.
	PodBackupDir = PodStewardDir + "/backups"
	// ReasonBackupVolumeRefused is the Ready condition's reason (and the
	// Event's) for a claim CheckBackupClaim refuses.
	ReasonBackupVolumeRefused = "BackupVolumeRefused"
)

// ErrBackupVolume refuses the claim spec.backup.volume names.
var ErrBackupVolume = errors.New("the backup volume is refused")

// CheckBackupClaim decides whether the claim claimName (pvc, nil when it
// does not exist) can hold the backups of a cluster of pods member pods:
// every pod mounts it read-write as a file system.
func CheckBackupClaim(claimName string, pvc *corev1.PersistentVolumeClaim, pods int) error {
	if pvc == nil {
		return fmt.Errorf("%w: spec.backup.volume.claimName: there is no PersistentVolumeClaim %s in the cluster's namespace: create it (ReadWriteMany, or ReadWriteOnce for one member) or name an existing one", ErrBackupVolume, claimName)
	}
	if pvc.DeletionTimestamp != nil {
		return fmt.Errorf("%w: PersistentVolumeClaim %s is being deleted: name another claim", ErrBackupVolume, claimName)
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return fmt.Errorf("%w: PersistentVolumeClaim %s is a block volume (volumeMode Block): backups are files, give a claim of volumeMode Filesystem", ErrBackupVolume, claimName)
	}
	modes := pvc.Spec.AccessModes
	if slices.Contains(modes, corev1.ReadWriteMany) {
		return nil
	}
	if !slices.Contains(modes, corev1.ReadWriteOnce) && !slices.Contains(modes, corev1.ReadWriteOncePod) {
		return fmt.Errorf("%w: PersistentVolumeClaim %s has access modes %v: the members write backups to it; give a ReadWriteMany claim (or ReadWriteOnce for one member)", ErrBackupVolume, claimName, modes)
	}
	if pods > 1 {
		return fmt.Errorf("%w: PersistentVolumeClaim %s is %v, not ReadWriteMany: its volume attaches to one node, and every one of the %d member pods mounts it (the member that leads records backups, and leadership moves); give a ReadWriteMany claim, or keep one member (replicas: 1)", ErrBackupVolume, claimName, modes, pods)
	}
	return nil
}

// checkBackupVolume reads the claim spec.backup.volume names (uncached)
// and decides on it for spec.replicas member pods.
func (r *Reconciler) checkBackupVolume(ctx context.Context, ec *v1alpha1.EtcdCluster) error {
	name := ec.Spec.Backup.Volume.ClaimName
	var pvc corev1.PersistentVolumeClaim
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &pvc)
	if apierrors.IsNotFound(err) {
		return CheckBackupClaim(name, nil, int(ec.Spec.Replicas))
	} else if err != nil {
		return fmt.Errorf("spec.backup.volume.claimName %s: %w", name, err)
	}
	return CheckBackupClaim(name, &pvc, int(ec.Spec.Replicas))
}

// backupStoreName names ec's backup store in messages.
func backupStoreName(ec *v1alpha1.EtcdCluster) string {
	b := ec.Spec.Backup
	switch {
	case b == nil:
		return "none"
	case b.Volume != nil:
		return "PersistentVolumeClaim " + b.Volume.ClaimName
	case b.S3 != nil:
		return b.S3.Endpoint + "/" + b.S3.Bucket
	}
	return "none"
}
