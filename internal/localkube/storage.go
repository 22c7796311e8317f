package localkube

// Dynamic local volumes: the default StorageClass "local" and its
// provisioner, rancher's local-path logic written small, run by the owner
// process (a goroutine of Up's caller, or of `localkube up`'s supervisor)
// rather than in a pod: a claim of the class, once the scheduler picked its
// pod's node (WaitForFirstConsumer), gets a directory of that node
// (DIR/nodes/NODE/volumes/pvc-UID) as a `local` PersistentVolume pinned to
// the node and bound to the claim; a released volume's directory and
// PersistentVolume are deleted (reclaim policy Delete).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// StorageClass is the default StorageClass's name, Provisioner its
	// provisioner.
	StorageClass = "local"
	Provisioner  = "localkube.steward/local-path"
	// selectedNode is the annotation the scheduler puts on a claim of a
	// WaitForFirstConsumer class.
	selectedNode = "volume.kubernetes.io/selected-node"
)

func (c *Cluster) storage(ctx context.Context, cs *kubernetes.Clientset) error {
	bind := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClass,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: Provisioner, VolumeBindingMode: &bind, ReclaimPolicy: &reclaim,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage class: %w", err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.stopProvisioner = cancel
	c.mu.Unlock()
	go c.provision(pctx, cs)
	return nil
}

// provision runs the provisioner until ctx ends: every 300 ms it provisions
// the claims waiting for it and deletes the volumes released.
func (c *Cluster) provision(ctx context.Context, cs *kubernetes.Clientset) {
	logf := func(format string, args ...any) { c.logf("provisioner: "+format, args...) }
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		claims, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, pvc := range claims.Items {
			if err := c.provisionClaim(ctx, cs, &pvc); err != nil {
				logf("claim %s/%s: %v", pvc.Namespace, pvc.Name, err)
			}
		}
		pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, pv := range pvs.Items {
			if pv.Spec.StorageClassName != StorageClass || pv.Status.Phase != corev1.VolumeReleased ||
				pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.Local == nil {
				continue
			}
			dir, err := ownVolumeDir(&pv, c.Nodes)
			if err != nil {
				continue // not ours: someone else's volume, left alone
			}
			if err := os.RemoveAll(dir); err != nil {
				logf("volume %s: %v", pv.Name, err)
				continue
			}
			if err := cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				logf("volume %s: %v", pv.Name, err)
			}
		}
	}
}

// ownVolumeDir returns the directory of a PersistentVolume this
// provisioner made, or an error if pv is not one: the provisioner runs as
// root in the machine's mount namespace, and anyone who may create a
// PersistentVolume could otherwise have any path deleted. Ours carry the
// provisioned-by annotation, are named pvc-UID after their claim and sit at
// exactly NODE.Dir/volumes/pvc-UID of one of nodes, with no symbolic link on
// the way from NODE.Dir.
func ownVolumeDir(pv *corev1.PersistentVolume, nodes []*Node) (string, error) {
	if pv.Annotations["pv.kubernetes.io/provisioned-by"] != Provisioner {
		return "", fmt.Errorf("volume %s: not provisioned by %s", pv.Name, Provisioner)
	}
	if pv.Spec.Local == nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" ||
		pv.Name != "pvc-"+string(pv.Spec.ClaimRef.UID) || strings.Contains(pv.Name, "/") {
		return "", fmt.Errorf("volume %s: not named after its claim", pv.Name)
	}
	for _, n := range nodes {
		want := filepath.Join(n.Dir, "volumes", pv.Name)
		if pv.Spec.Local.Path != want {
			continue
		}
		for _, d := range []string{filepath.Join(n.Dir, "volumes"), want} {
			fi, err := os.Lstat(d)
			if err != nil {
				return "", err
			}
			if !fi.IsDir() {
				return "", fmt.Errorf("volume %s: %s is not a directory", pv.Name, d)
			}
		}
		return want, nil
	}
	return "", fmt.Errorf("volume %s: %s is not a volume directory of this cluster's nodes", pv.Name, pv.Spec.Local.Path)
}

func (c *Cluster) provisionClaim(ctx context.Context, cs *kubernetes.Clientset, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != StorageClass {
		return nil
	}
	nodeName := pvc.Annotations[selectedNode]
	if nodeName == "" {
		return nil // the scheduler has not picked a node yet
	}
	var node *Node
	for _, n := range c.Nodes {
		if n.Name == nodeName {
			node = n
		}
	}
	if node == nil {
		return fmt.Errorf("selected node %q is not one of this cluster's", nodeName)
	}
	name := "pvc-" + string(pvc.UID)
	if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil // made; the PV controller binds it
	}
	dir := filepath.Join(node.Dir, "volumes", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Pods of any user write there, as in a kind cluster's local-path
	// volumes; the directory above stays private.
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClass,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}},
			}}}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	c.logf("provisioner: %s for claim %s/%s on node %s", name, pvc.Namespace, pvc.Name, node.Name)
	return nil
}
