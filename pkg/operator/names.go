package operator

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// Ports of a member pod.
const (
	ClientPort = 2379
	PeerPort   = 2380
	AgentPort  = 2378
	// ProbePort serves the agent's /livez and /readyz (plain HTTP) for
	// the kubelet's probes.
	ProbePort = 8080
)

// Paths inside a member pod (the Steward image: internal/kubeimages).
const (
	// PodStewardDir is the agent's directory, on the member's volume.
	PodStewardDir = "/var/lib/steward"
	// PodJoinDir holds the pod's own join file (NAME-I.yaml), copied by
	// the init container out of the join Secret into an emptyDir in
	// memory: the member container mounts neither the Secret nor the
	// other pods' keys.
	PodJoinDir = "/etc/steward/join"
	// PodJoinSecretDir is where the init container mounts the join
	// Secret (every pod's file).
	PodJoinSecretDir = "/etc/steward/join-secret"
	// PodBinaryStore holds the etcd versions of the image.
	PodBinaryStore = "/opt/steward/binaries"
	// DataVolume is the name of the StatefulSet's claim template: the
	// claims are data-NAME-I.
	DataVolume = "data"
)

// Label keys the operator sets on what it makes.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelCluster   = "steward.etcd.io/cluster"
)

// Names of the objects of one EtcdCluster.
func peerService(ec *v1alpha1.EtcdCluster) string   { return ec.Name + "-peer" }
func clientService(ec *v1alpha1.EtcdCluster) string { return ec.Name + "-client" }
func caSecret(ec *v1alpha1.EtcdCluster) string      { return ec.Name + "-ca" }
func joinSecret(ec *v1alpha1.EtcdCluster) string    { return ec.Name + "-join" }

// BackupKeySecret is the Secret NAME-backup-key: the cluster backup key
// only (key BackupKeyKey), which `kubectl steward backups` reads and a
// restore from this cluster's backups names (spec.restoreFrom.backupKeySecret).
func BackupKeySecret(ec *v1alpha1.EtcdCluster) string { return ec.Name + "-backup-key" }

// BackupKeyKey is the key of the cluster backup key (64 hex digits, as
// DIR/pki/backup-auth.key holds it on hosts) in a backup key Secret.
const BackupKeyKey = "backup-auth.key"

func clientTLSSecret(ec *v1alpha1.EtcdCluster) string {
	return ec.Name + "-client-tls"
}
func memberAccount(ec *v1alpha1.EtcdCluster) string { return ec.Name + "-member" }

// PodName is the name of member pod i (from 0), which is also its agent's
// and its member's name in the Steward spec.
func PodName(ec *v1alpha1.EtcdCluster, i int) string { return fmt.Sprintf("%s-%d", ec.Name, i) }

// HostName is the DNS name of member pod i through the peer Service:
// where its agent and member are reached and what etcd advertises.
func HostName(ec *v1alpha1.EtcdCluster, i int, domain string) string {
	if domain == "" {
		domain = DefaultClusterDomain
	}
	return fmt.Sprintf("%s.%s.%s.svc.%s", PodName(ec, i), peerService(ec), ec.Namespace, domain)
}

// DefaultClusterDomain is Kubernetes' default DNS domain.
const DefaultClusterDomain = "cluster.local"

// selectorLabels select the member pods of ec.
func selectorLabels(ec *v1alpha1.EtcdCluster) map[string]string {
	return map[string]string{LabelName: "etcd", LabelInstance: ec.Name, LabelCluster: ec.Name}
}

// objectLabels are set on every object the operator makes for ec.
func objectLabels(ec *v1alpha1.EtcdCluster) map[string]string {
	l := selectorLabels(ec)
	l[LabelManagedBy] = "steward"
	return l
}

// Selector is status.selector: the member pods' label selector.
func Selector(ec *v1alpha1.EtcdCluster) string {
	return labels.SelectorFromSet(selectorLabels(ec)).String()
}
