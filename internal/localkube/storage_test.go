package localkube

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestOwnVolumeDir: the provisioner deletes only a directory it made
// (NODE.Dir/volumes/pvc-UID of one of the cluster's nodes, annotated as
// provisioned by it), never a path a PersistentVolume's creator names.
func TestOwnVolumeDir(t *testing.T) {
	root := t.TempDir()
	node := &Node{Name: "node-a", Dir: filepath.Join(root, "nodes", "node-a")}
	other := filepath.Join(root, "elsewhere")
	for _, d := range []string{filepath.Join(node.Dir, "volumes", "pvc-u1"), other,
		filepath.Join(node.Dir, "volumes", "pvc-u3")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(other, filepath.Join(node.Dir, "volumes", "pvc-u2")); err != nil {
		t.Fatal(err)
	}
	pv := func(name, uid, path string, annotated bool) *corev1.PersistentVolume {
		p := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				ClaimRef:               &corev1.ObjectReference{UID: types.UID(uid)},
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			}}
		if annotated {
			p.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}
		}
		return p
	}
	vol := func(n string) string { return filepath.Join(node.Dir, "volumes", n) }
	if got, err := ownVolumeDir(pv("pvc-u1", "u1", vol("pvc-u1"), true), []*Node{node}); err != nil || got != vol("pvc-u1") {
		t.Errorf("own volume: %q, %v", got, err)
	}
	for name, p := range map[string]*corev1.PersistentVolume{
		"not annotated":    pv("pvc-u1", "u1", vol("pvc-u1"), false),
		"any path":         pv("pvc-u1", "u1", other, true),
		"root":             pv("pvc-u1", "u1", "/", true),
		"uncleaned path":   pv("pvc-u1", "u1", node.Dir+"/volumes/x/../pvc-u1", true),
		"dot-dot":          pv("pvc-u1", "u1", vol("pvc-u1")+"/../../../elsewhere", true),
		"name not claim's": pv("pvc-u3", "u1", vol("pvc-u3"), true),
		"slash in uid":     pv("pvc-../../elsewhere", "../../elsewhere", vol("pvc-../../elsewhere"), true),
		"symbolic link":    pv("pvc-u2", "u2", vol("pvc-u2"), true),
		"not on a node":    pv("pvc-u1", "u1", filepath.Join(root, "nodes", "node-b", "volumes", "pvc-u1"), true),
		"no claim":         {ObjectMeta: metav1.ObjectMeta{Name: "pvc-u1", Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: vol("pvc-u1")}}}},
	} {
		if got, err := ownVolumeDir(p, []*Node{node}); err == nil {
			t.Errorf("%s: %q accepted", name, got)
		}
	}
}
