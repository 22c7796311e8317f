package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EtcdCluster is an etcd cluster whose members run as pods, one volume
// each, managed by Steward's operator. Only spec.replicas is required.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=etcd;ec,categories=steward
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.readyReplicasText`,description="ready members / replicas"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,description="the etcd version every member runs"
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`,description="the member that leads"
// +kubebuilder:printcolumn:name="Backup",type=date,JSONPath=`.status.lastBackupTime`,description="time of the newest backup"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EtcdClusterSpec   `json:"spec"`
	Status EtcdClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}

// EtcdClusterSpec is what the user asks for. Only replicas is required;
// every other field has a default, written into the stored object at
// admission where the schema can say it (storage.size, recovery, backup's
// schedule and retention) and applied by the operator otherwise.
//
// The rules below compare an update with the stored object (oldSelf): the
// API server refuses the update, and nothing is stored. What only the
// running cluster can tell (quorum, a version the catalogue knows, a
// reachable backup store) the operator reports in a condition instead.
//
// +kubebuilder:validation:XValidation:rule="has(oldSelf.restoreFrom) == has(self.restoreFrom)",message="restoreFrom is read once, when the cluster is created: it cannot be added or removed later; restore into a new EtcdCluster",fieldPath=.restoreFrom
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.version) || has(self.version)",message="version cannot be removed once set (the members run it): name the version to run",fieldPath=.version
// +kubebuilder:validation:XValidation:rule="(has(self.backup) && has(self.backup.volume)) == (has(oldSelf.backup) && has(oldSelf.backup.volume)) && (!has(self.backup) || !has(self.backup.volume) || self.backup.volume == oldSelf.backup.volume)",message="backup.volume is read when the cluster is created (every member pod mounts the claim): it cannot be added, changed or removed later; restore into a new EtcdCluster to move the backups",fieldPath=.backup
// +kubebuilder:validation:XValidation:rule="has(self.tls) && has(self.tls.caSecret) ? (has(oldSelf.tls) && has(oldSelf.tls.caSecret) && self.tls.caSecret == oldSelf.tls.caSecret) : !(has(oldSelf.tls) && has(oldSelf.tls.caSecret))",message="tls.caSecret is read when the cluster is created and cannot be added, changed or removed: every member's certificate is issued by that CA, and replacing the CA of running pods is not done yet; fix a refused Secret's content under the same name, or create a new EtcdCluster",fieldPath=.tls
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.backup.volume) || has(self.backup.s3) || (has(self.recovery) && has(self.recovery.mode) && self.recovery.mode == 'manual')",message="backup.volume needs recovery.mode: manual: the operator cannot mount the claim, so an automatic recovery would not see the newest backups; set recovery.mode: manual, or keep the backups in backup.s3",fieldPath=.recovery
type EtcdClusterSpec struct {
	// Replicas is the number of voting members: 0 (hibernated: no pod
	// runs, volumes and backups are kept), 1, 3, 5 or 7. An even count
	// would tolerate no more failures than the odd one below it. It is
	// the scale subresource's spec (kubectl scale). A change while quorum
	// is lost is not carried out: the Ready condition says why.
	//
	// +kubebuilder:validation:XValidation:rule="self in [0, 1, 3, 5, 7]",message="replicas must be 0 (hibernate), 1, 3, 5 or 7: an even number of members tolerates no more failures than one fewer"
	Replicas int32 `json:"replicas"`

	// Version is the etcd version members run, 3.MINOR.PATCH ("3.6.16").
	// Empty: the version Steward embeds; once set it cannot be removed. A
	// change is carried out as a persisted rolling upgrade (or, set back,
	// a rollback that keeps every write). A change of several minors in
	// one edit (3.5 to 3.7) is allowed: the plan steps through the latest
	// patch of each minor in between, as on hosts (the version
	// catalogue's paths). The operator refuses a version its catalogue
	// does not know in the UpgradeInProgress condition, and changes
	// nothing.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^3\\\\.(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)$')",message="version must be an etcd 3 release, 3.MINOR.PATCH (e.g. 3.6.16), without a leading v or a pre-release suffix"
	Version string `json:"version,omitempty"`

	// Storage is each member's volume.
	//
	// +optional
	// +kubebuilder:default={}
	Storage Storage `json:"storage,omitempty"`

	// Backup says where continuous backups (full snapshots and deltas, in
	// Steward's format: the same store works for hosts and pods) go.
	// Without it the cluster has no backups, and a quorum loss whose
	// volumes are gone cannot be recovered.
	//
	// +optional
	Backup *Backup `json:"backup,omitempty"`

	// Recovery says what the operator does when quorum is lost.
	//
	// +optional
	// +kubebuilder:default={}
	Recovery Recovery `json:"recovery,omitempty"`

	// RestoreFrom creates the cluster from a backup (one taken by Steward
	// on hosts or in pods) instead of empty. Read only when the cluster is
	// created: it cannot be added, changed or removed later.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="restoreFrom is read once, when the cluster is created, and cannot change: restore into a new EtcdCluster"
	RestoreFrom *RestoreFrom `json:"restoreFrom,omitempty"`

	// TLS says where the certificates come from.
	//
	// +optional
	TLS TLS `json:"tls,omitempty"`

	// Etcd holds the settings every member runs with.
	//
	// +optional
	Etcd EtcdSettings `json:"etcd,omitempty"`

	// Pod holds what the member pods are scheduled and sized with.
	//
	// +optional
	Pod PodSettings `json:"pod,omitempty"`
}

// Storage is a member's volume: a PersistentVolumeClaim per member pod
// (data-NAME-I).
//
// +kubebuilder:validation:XValidation:rule="has(oldSelf.storageClassName) == has(self.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storageClassName cannot change (nor be added or removed) once the cluster is created: members keep their volumes; restore into a new EtcdCluster to move to another class",fieldPath=.storageClassName
type Storage struct {
	// Size of each member's volume (default 8Gi). It can grow (where the
	// StorageClass allows volume expansion), never shrink.
	//
	// +optional
	// +kubebuilder:default="8Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="size cannot shrink: a member's volume is never made smaller; keep the size or make it larger"
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the members' claims (default: the cluster's
	// default StorageClass). Fixed once the cluster is created.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// Backup configures continuous backups.
//
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.volume)",message="backup needs exactly one store, s3 (a bucket) or volume (a claim): give one, not both"
type Backup struct {
	// S3 keeps backups in an S3-compatible bucket.
	//
	// +optional
	S3 *S3 `json:"s3,omitempty"`

	// Volume keeps backups on an existing PersistentVolumeClaim every
	// member pod mounts (ReadWriteMany, or ReadWriteOnce for one member).
	// It needs recovery.mode manual: the operator cannot read the claim.
	//
	// +optional
	Volume *BackupVolume `json:"volume,omitempty"`

	// FullSchedule is a cron expression (5 fields: minute hour
	// day-of-month month day-of-week) for full snapshots (default
	// "0 * * * *": hourly); deltas are continuous in between.
	//
	// +optional
	// +kubebuilder:default="0 * * * *"
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^\\\\s*(\\\\S+\\\\s+){4}\\\\S+\\\\s*$')",message="fullSchedule must be a cron expression of 5 fields: minute hour day-of-month month day-of-week (e.g. \"0 * * * *\")"
	FullSchedule string `json:"fullSchedule,omitempty"`

	// DeltaMaxAgeMs closes a delta segment this long after its first
	// event (default 250): the recovery point objective.
	//
	// +optional
	// +kubebuilder:default=250
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	DeltaMaxAgeMs int32 `json:"deltaMaxAgeMs,omitempty"`

	// Retention says which full backups (with their deltas) are kept.
	//
	// +optional
	// +kubebuilder:default={}
	Retention Retention `json:"retention,omitempty"`
}

// S3 names an S3-compatible bucket, as the hosts' spec does
// (backup.s3), with Secrets in place of files.
type S3 struct {
	// Endpoint is the server's URL: https://host[:port] (http:// only for
	// tests and servers inside the cluster's own network), without a
	// path: the bucket is named by bucket.
	//
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/\\\\s?#]+/?$')",message="endpoint must be the server's URL, https://HOST[:PORT] (or http://), without a path: name the bucket in bucket"
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name.
	//
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// Prefix is prepended to every object name (one prefix per cluster;
	// default NAMESPACE/NAME).
	//
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket, for servers that ask.
	//
	// +optional
	Region string `json:"region,omitempty"`

	// CredentialsSecret names a Secret in the cluster's namespace with the
	// keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
	//
	// +kubebuilder:validation:MinLength=1
	CredentialsSecret string `json:"credentialsSecret"`

	// CASecret names a Secret in the cluster's namespace whose key ca.crt
	// is the PEM bundle to trust for a server with a private CA.
	//
	// +optional
	CASecret string `json:"caSecret,omitempty"`
}

// BackupVolume is an existing PersistentVolumeClaim the backups are
// written to, in Steward's local directory layout (the hosts'
// backup.store). Every member pod mounts it at /var/lib/steward/backups,
// and the member whose etcd leads records there (one at a time, by the
// backup election), so the claim must reach every member pod: a
// ReadWriteMany claim, or a ReadWriteOnce one for a cluster of one member
// (a ReadWriteOnce volume attaches to one node; the operator refuses it
// for more members). The operator never creates, resizes nor deletes it:
// the backups outlive the EtcdCluster.
type BackupVolume struct {
	// ClaimName of a PersistentVolumeClaim in the cluster's namespace.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`
}

// Retention keeps the last KeepLast full backups, plus the newest of each
// of the last KeepHourly hours and KeepDaily days (defaults 3, 24, 7), as
// the hosts' backup.retention.
type Retention struct {
	// KeepLast is how many of the newest full backups are kept (default
	// 3).
	//
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	KeepLast int32 `json:"keepLast,omitempty"`
	// KeepHourly keeps the newest full backup of each of the last this
	// many hours (default 24; 0: none). A pointer, so that an explicit 0
	// is not taken for the default.
	//
	// +optional
	// +kubebuilder:default=24
	// +kubebuilder:validation:Minimum=0
	KeepHourly *int32 `json:"keepHourly,omitempty"`
	// KeepDaily keeps the newest full backup of each of the last this
	// many days (default 7; 0: none). A pointer, as KeepHourly.
	//
	// +optional
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=0
	KeepDaily *int32 `json:"keepDaily,omitempty"`
}

// Recovery configures quorum-loss recovery, as the hosts' spec's recovery.
type Recovery struct {
	// Mode is "auto" (default: once quorum has been lost for
	// GracePeriodSeconds and the members that are left cannot restore it,
	// the operator recovers from the newest backup and records why) or
	// "manual" (report it in the Ready condition; `kubectl steward
	// recover` acts).
	//
	// +optional
	// +kubebuilder:default=auto
	// +kubebuilder:validation:Enum=auto;manual
	Mode string `json:"mode,omitempty"`

	// GracePeriodSeconds waits out restarts and short partitions
	// (default 120).
	//
	// +optional
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=10
	GracePeriodSeconds int32 `json:"gracePeriodSeconds,omitempty"`
}

// RestoreFrom names a backup to create the cluster from.
//
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.volume)",message="restoreFrom needs exactly one store, s3 (a bucket) or volume (a claim): give one, not both"
type RestoreFrom struct {
	// S3 is the bucket and prefix the backup was written to (by Steward
	// on hosts: the hosts' spec's backup.s3 prefix).
	//
	// +optional
	S3 *S3 `json:"s3,omitempty"`

	// Volume is a claim holding a backup store.
	//
	// +optional
	Volume *BackupVolume `json:"volume,omitempty"`

	// Revision restores the newest state at or before this revision
	// (default: the newest the store holds).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision,omitempty"`

	// BackupKeySecret names a Secret (key backup-auth.key: 64 hex digits)
	// holding the cluster backup key of the cluster that took the backup:
	// on hosts its DIR/pki/backup-auth.key, in Kubernetes its Secret
	// NAME-backup-key. Every backup manifest is authenticated under it
	// before anything is restored, and the new cluster keeps it as its own
	// backup key (the same cluster, moved). Without it, or with backups
	// that do not authenticate under it, the restore is refused (Ready
	// False, reason RestoreNotAuthenticated) and nothing is created.
	//
	// +optional
	BackupKeySecret string `json:"backupKeySecret,omitempty"`
}

// TLS says where the cluster's certificates come from.
type TLS struct {
	// CASecret names a Secret in the cluster's namespace holding the CA
	// the operator issues every member's and client's certificate from:
	// tls.crt (or ca.crt) the CA certificate, one PEM certificate, and
	// tls.key (or ca.key) its ECDSA key. It must be a CA that may sign
	// certificates and be valid now; otherwise the cluster is not created
	// (Ready False, reason CARefused). Read once, when the cluster is
	// created; it cannot be added, changed or removed later. Empty: the
	// operator makes a CA of its own. Either way the CA key stays in the
	// operator's state (never in a Secret it makes), Secret NAME-ca holds
	// the certificate (ca.crt), and certificates are renewed before they
	// expire, with no restart.
	//
	// +optional
	CASecret string `json:"caSecret,omitempty"`
}

// EtcdSettings are the settings every member runs with (the hosts'
// spec's etcd section, with its names and defaults: docs/cluster-spec.md).
//
// +kubebuilder:validation:XValidation:rule="!has(self.electionTimeoutMs) || !has(self.heartbeatIntervalMs) || self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs",message="electionTimeoutMs must be at least 5 times heartbeatIntervalMs",fieldPath=.electionTimeoutMs
type EtcdSettings struct {
	// QuotaBackendBytes is the database size at which etcd raises NOSPACE.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	QuotaBackendBytes int64 `json:"quotaBackendBytes,omitempty"`

	// AutoCompactionMode is "periodic" or "revision".
	//
	// +optional
	// +kubebuilder:validation:Enum=periodic;revision
	AutoCompactionMode string `json:"autoCompactionMode,omitempty"`

	// AutoCompactionRetention is a duration ("1h") in periodic mode or a
	// revision count in revision mode.
	//
	// +optional
	AutoCompactionRetention string `json:"autoCompactionRetention,omitempty"`

	// SnapshotCount is the number of applied entries between raft
	// snapshots.
	//
	// +optional
	SnapshotCount int64 `json:"snapshotCount,omitempty"`

	// HeartbeatIntervalMs is raft's heartbeat interval, in milliseconds
	// (default 100).
	//
	// +optional
	// +kubebuilder:validation:Minimum=10
	HeartbeatIntervalMs int32 `json:"heartbeatIntervalMs,omitempty"`

	// ElectionTimeoutMs is raft's election timeout, in milliseconds
	// (default 1000); at least 5 times HeartbeatIntervalMs.
	//
	// +optional
	// +kubebuilder:validation:Minimum=50
	ElectionTimeoutMs int32 `json:"electionTimeoutMs,omitempty"`

	// ExtraFlags are further etcd flags, passed to every member as
	// --KEY=VALUE, spelt for the version each member runs. Flags Steward
	// sets from the spec (name, data dir, URLs, TLS) are refused by the
	// operator in the Ready condition, as on hosts.
	//
	// +optional
	ExtraFlags map[string]string `json:"extraFlags,omitempty"`
}

// PodSettings are what member pods are sized and scheduled with.
type PodSettings struct {
	// Resources of the member container (etcd and Steward's member
	// runtime beside it).
	//
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Affinity of the member pods (default: none; members are spread over
	// zones by the default topologySpreadConstraints).
	//
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints of the member pods (default: at most one
	// more member in any zone than in another, topology.kubernetes.io/zone,
	// and the same over nodes).
	//
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the member pods.
	//
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// NodeSelector of the member pods.
	//
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the member pods.
	//
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// EtcdClusterStatus is what the operator observed.
type EtcdClusterStatus struct {
	// ObservedGeneration is the generation of the spec this status
	// describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of voting members etcd lists (the scale
	// subresource's status).
	//
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of members that are Ready.
	//
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// ReadyReplicasText is ReadyReplicas/spec.replicas, for kubectl get.
	//
	// +optional
	ReadyReplicasText string `json:"readyReplicasText,omitempty"`

	// Selector is the label selector of the member pods, as a string (the
	// scale subresource's selector).
	//
	// +optional
	Selector string `json:"selector,omitempty"`

	// Version is the etcd version every member runs; empty while they
	// differ (an upgrade in progress: see members[].version).
	//
	// +optional
	Version string `json:"version,omitempty"`

	// Leader is the name of the member that leads.
	//
	// +optional
	Leader string `json:"leader,omitempty"`

	// ClusterID is etcd's cluster ID, in hex.
	//
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// LastBackupTime is when the newest backup (full or delta) was
	// stored.
	//
	// +optional
	LastBackupTime *metav1.Time `json:"lastBackupTime,omitempty"`

	// Conditions: Ready (quorate), AllMembersReady, BackupReady,
	// UpgradeInProgress, CertificatesReady, DataVolumesReady.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Members are the cluster's members, by name (the pod's).
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []MemberStatus `json:"members,omitempty"`

	// LastOperation is the newest operation the operator started.
	//
	// +optional
	LastOperation *Operation `json:"lastOperation,omitempty"`
}

// Condition types of an EtcdCluster (DEP-01's, and Steward's own).
const (
	// ConditionReady: the cluster is quorate and serves requests.
	ConditionReady = "Ready"
	// ConditionAllMembersReady: every member is ready.
	ConditionAllMembersReady = "AllMembersReady"
	// ConditionBackupReady: the newest backup upload succeeded.
	ConditionBackupReady = "BackupReady"
	// ConditionUpgradeInProgress: an upgrade or rollback plan is running.
	ConditionUpgradeInProgress = "UpgradeInProgress"
	// ConditionCertificatesReady: every certificate is valid and not due
	// for renewal.
	ConditionCertificatesReady = "CertificatesReady"
	// ConditionDataVolumesReady: every member's claim is bound and holds
	// the member's data.
	ConditionDataVolumesReady = "DataVolumesReady"
)

// MemberStatus is one member as the operator saw it.
type MemberStatus struct {
	// Name of the member: its pod's name.
	Name string `json:"name"`
	// ID is etcd's member ID, in hex.
	//
	// +optional
	ID string `json:"id,omitempty"`
	// Role is Leader, Member or Learner.
	//
	// +optional
	// +kubebuilder:validation:Enum=Leader;Member;Learner
	Role string `json:"role,omitempty"`
	// Ready says the member is started, in the cluster, caught up and
	// renewing its lease.
	Ready bool `json:"ready"`
	// Version is the etcd version the member runs.
	//
	// +optional
	Version string `json:"version,omitempty"`
	// Reason says why the member is (not) ready: LeaseSucceeded,
	// LeaseExpired, PodNotReady, NotInCluster, Learner, ...
	//
	// +optional
	Reason string `json:"reason,omitempty"`
	// LastTransitionTime is when Ready last changed.
	//
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
}

// Operation is an operation the operator carried out on the cluster.
type Operation struct {
	// Type: Create, ScaleUp, ScaleDown, Hibernate, Wake, Replace, Recover,
	// Upgrade, Rollback, Defragment, RenewCertificates, Restore.
	Type string `json:"type"`
	// State: Running, Succeeded, Failed.
	//
	// +kubebuilder:validation:Enum=Running;Succeeded;Failed
	State string `json:"state"`
	// Description says what it does or did, and why it failed.
	//
	// +optional
	Description string `json:"description,omitempty"`
	// Plan is the name of the persisted plan carrying it out, if any
	// (`kubectl steward plan show`).
	//
	// +optional
	Plan string `json:"plan,omitempty"`
	// StartTime is when it started.
	StartTime metav1.Time `json:"startTime"`
	// EndTime is when it ended (empty while Running).
	//
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
}
