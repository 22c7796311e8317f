package operator

// What a user sees of an EtcdCluster from outside the operator (the kubectl
// plugin): its status as the operator wrote it, and the backups of the
// store its spec names, read with the credentials of the Secret the spec
// names and trusted under the cluster backup key its Secret
// NAME-backup-key holds (that key alone), exactly as `steward backup list`
// trusts them on hosts. Nothing here writes: the reads need get on
// the EtcdCluster and on those Secrets.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/backup"
)

// View is an EtcdCluster as the plugin shows it. JSON field names are
// stable.
type View struct {
	Namespace      string                  `json:"namespace"`
	Name           string                  `json:"name"`
	Replicas       int32                   `json:"replicas"`
	ReadyReplicas  int32                   `json:"readyReplicas"`
	Version        string                  `json:"version,omitempty"`
	ClusterID      string                  `json:"clusterID,omitempty"`
	Leader         string                  `json:"leader,omitempty"`
	Members        []v1alpha1.MemberStatus `json:"members"`
	Conditions     []metav1.Condition      `json:"conditions"`
	LastOperation  *v1alpha1.Operation     `json:"lastOperation,omitempty"`
	LastBackupTime *metav1.Time            `json:"lastBackupTime,omitempty"`
	// RestoredFrom is spec.restoreFrom's store, when the cluster was
	// made from a backup.
	RestoredFrom string `json:"restoredFrom,omitempty"`
	// Backups is the backup store of spec.backup; nil without one.
	Backups *BackupsView `json:"backups,omitempty"`
}

// BackupsView is the backups of an EtcdCluster's store.
type BackupsView struct {
	// Store names the store (s3://BUCKET/PREFIX at ENDPOINT).
	Store string `json:"store"`
	// Backups are the trusted backups, oldest first.
	Backups []backup.Manifest `json:"backups"`
	// Ignored are the manifests not trusted, each with why.
	Ignored []string `json:"ignored,omitempty"`
	// Error says why the store could not be listed ("" when it was).
	Error string `json:"error,omitempty"`
}

// Inspect reads the EtcdCluster NAMESPACE/NAME and, with withBackups, the
// backups of its store. A store that cannot be read is reported in
// View.Backups.Error, not returned: the status is still worth showing.
func Inspect(ctx context.Context, cl client.Client, namespace, name string, withBackups bool) (*View, error) {
	var ec v1alpha1.EtcdCluster
	if err := cl.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &ec); err != nil {
		return nil, fmt.Errorf("EtcdCluster %s/%s: %w", namespace, name, err)
	}
	st := ec.Status
	v := &View{Namespace: namespace, Name: name, Replicas: ec.Spec.Replicas, ReadyReplicas: st.ReadyReplicas,
		Version: st.Version, ClusterID: st.ClusterID, Leader: st.Leader, Members: st.Members,
		Conditions: st.Conditions, LastOperation: st.LastOperation, LastBackupTime: st.LastBackupTime}
	if v.Members == nil {
		v.Members = []v1alpha1.MemberStatus{}
	}
	if v.Conditions == nil {
		v.Conditions = []metav1.Condition{}
	}
	if rf := ec.Spec.RestoreFrom; rf != nil && rf.S3 != nil {
		if s, err := RestoreSource(&ec, false); err == nil {
			v.RestoredFrom = storeName(s.Endpoint, s.Bucket, s.Prefix)
		}
	}
	if withBackups && ec.Spec.Backup != nil && ec.Spec.Backup.S3 != nil {
		bv := Backups(ctx, cl, &ec)
		v.Backups = &bv
	} else if withBackups && ec.Spec.Backup != nil && ec.Spec.Backup.Volume != nil {
		// Only the member pods mount the claim (backupvolume.go).
		v.Backups = &BackupsView{Store: backupStoreName(&ec), Backups: []backup.Manifest{},
			Error: "the backups are on a PersistentVolumeClaim only the member pods mount: they cannot be listed from outside; the BackupReady condition and status.lastBackupTime say what the member that leads recorded"}
	}
	return v, nil
}

func storeName(endpoint, bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s at %s", bucket, prefix, endpoint)
}

// Backups lists the backups of ec's spec.backup.s3 store (the prefix
// defaults as the operator's: NAMESPACE/NAME).
func Backups(ctx context.Context, cl client.Client, ec *v1alpha1.EtcdCluster) BackupsView {
	s3 := ec.Spec.Backup.S3
	prefix := s3.Prefix
	if prefix == "" {
		prefix = ec.Namespace + "/" + ec.Name
	}
	endpoint := strings.TrimRight(s3.Endpoint, "/")
	bv := BackupsView{Store: storeName(endpoint, s3.Bucket, prefix), Backups: []backup.Manifest{}}
	fail := func(err error) BackupsView {
		bv.Error = err.Error()
		return bv
	}
	tmp, err := os.MkdirTemp("", "steward-inspect-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	cfg := backup.S3Config{Endpoint: endpoint, Bucket: s3.Bucket, Prefix: prefix, Region: s3.Region}
	var sec corev1.Secret
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: s3.CredentialsSecret}, &sec); err != nil {
		return fail(fmt.Errorf("spec.backup.s3.credentialsSecret %s: %w", s3.CredentialsSecret, err))
	}
	creds, err := S3Credentials(s3.CredentialsSecret, sec.Data)
	if err != nil {
		return fail(err)
	}
	cfg.CredentialsFile = filepath.Join(tmp, "credentials")
	if err := atomicfile.WriteFile(cfg.CredentialsFile, creds, 0o600); err != nil {
		return fail(err)
	}
	if s3.CASecret != "" {
		var ca corev1.Secret
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: s3.CASecret}, &ca); err != nil {
			return fail(fmt.Errorf("spec.backup.s3.caSecret %s: %w", s3.CASecret, err))
		}
		cfg.CAFile = filepath.Join(tmp, "ca.pem")
		if err := atomicfile.WriteFile(cfg.CAFile, ca.Data["ca.crt"], 0o600); err != nil {
			return fail(err)
		}
	}
	key, err := clusterBackupKey(ctx, cl, ec)
	if err != nil {
		return fail(err)
	}
	store, err := backup.NewS3Store(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	l, err := backup.List(ctx, store, backup.ListOptions{Key: key})
	if err != nil {
		return fail(err)
	}
	bv.Backups = append(bv.Backups, l.Backups...)
	for _, i := range l.Ignored {
		bv.Ignored = append(bv.Ignored, i.String())
	}
	return bv
}

// clusterBackupKey is the cluster backup key of ec, from its Secret
// NAME-backup-key (that key alone: never the join files, which hold the
// members' private keys).
func clusterBackupKey(ctx context.Context, cl client.Client, ec *v1alpha1.EtcdCluster) (*backup.AuthKey, error) {
	name := BackupKeySecret(ec)
	var sec corev1.Secret
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &sec); err != nil {
		return nil, fmt.Errorf("the cluster backup key (Secret %s): %w", name, err)
	}
	return BackupKeyFromSecret(name, sec.Data)
}

// ErrBackupKey: a backup key Secret is missing its key, or it is not a
// cluster backup key.
var ErrBackupKey = errors.New("no usable cluster backup key")

// BackupKeyFromSecret is the cluster backup key a Secret NAME holds under
// BackupKeyKey (64 hex digits); an absent or malformed one is refused,
// naming the Secret and the key, never the content.
func BackupKeyFromSecret(name string, data map[string][]byte) (*backup.AuthKey, error) {
	v, ok := data[BackupKeyKey]
	if !ok {
		return nil, fmt.Errorf("%w: Secret %s has no key %s (the cluster backup key: 64 hex digits, as DIR/pki/%s holds it on hosts)", ErrBackupKey, name, BackupKeyKey, BackupKeyKey)
	}
	k, err := ParseAuthKey(string(v))
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s, key %s: %w", ErrBackupKey, name, BackupKeyKey, err)
	}
	return k, nil
}

// ParseAuthKey parses a cluster backup key as its file holds it (64 hex
// digits).
func ParseAuthKey(s string) (*backup.AuthKey, error) {
	d, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(d) != 32 {
		return nil, fmt.Errorf("cluster backup key: want 64 hex digits")
	}
	var b [32]byte
	copy(b[:], d)
	return backup.NewAuthKey(b), nil
}
