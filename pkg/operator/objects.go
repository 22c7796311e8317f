package operator

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// DefaultStorageSize is a member volume's size when spec.storage.size is
// not given.
var DefaultStorageSize = resource.MustParse("8Gi")

// PodOptions are what the member pods are built with beyond the resource.
type PodOptions struct {
	// Image is the Steward image the member pods run (`make images`).
	Image string
	// PullPolicy of that image (default IfNotPresent).
	PullPolicy corev1.PullPolicy
	// Replicas, when set, is the pod count in place of spec.replicas: the
	// members the Steward spec has (a change of spec.replicas is carried
	// out member by member, never by the StatefulSet alone).
	Replicas *int32
}

// owned returns the metadata of an object the operator makes for ec:
// its namespace, labels and the owner reference that deletes it with ec.
func owned(ec *v1alpha1.EtcdCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: ec.Namespace, Labels: objectLabels(ec),
		OwnerReferences: []metav1.OwnerReference{ownerRef(ec)},
	}
}

func ownerRef(ec *v1alpha1.EtcdCluster) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "EtcdCluster",
		Name: ec.Name, UID: ec.UID, Controller: &t, BlockOwnerDeletion: &t,
	}
}

// PeerService is the headless Service NAME-peer that gives each member pod
// its DNS name; it publishes pods that are not ready, so members find
// each other (and the operator its agents) before they serve.
func PeerService(ec *v1alpha1.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: owned(ec, peerService(ec)),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 selectorLabels(ec),
			Ports: []corev1.ServicePort{
				{Name: "peer", Port: PeerPort, TargetPort: intstr.FromInt32(PeerPort)},
				{Name: "agent", Port: AgentPort, TargetPort: intstr.FromInt32(AgentPort)},
			},
		},
	}
}

// ClientService is the Service NAME-client that applications reach the
// cluster through: only ready member pods are in it.
func ClientService(ec *v1alpha1.EtcdCluster) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: owned(ec, clientService(ec)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(ec),
			Ports:    []corev1.ServicePort{{Name: "client", Port: ClientPort, TargetPort: intstr.FromInt32(ClientPort)}},
		},
	}
}

// DisruptionBudget lets one member pod at a time be evicted (a drain
// keeps quorum of 3 or more).
func DisruptionBudget(ec *v1alpha1.EtcdCluster) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: owned(ec, ec.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &one,
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(ec)},
		},
	}
}

// MemberAccount is the member pods' ServiceAccount, and MemberRole its
// Role: get and update its cluster's member Leases (NAME-I) only.
func MemberAccount(ec *v1alpha1.EtcdCluster) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: owned(ec, memberAccount(ec))}
}

// MemberRole: see MemberAccount.
func MemberRole(ec *v1alpha1.EtcdCluster) *rbacv1.Role {
	var names []string
	for i := range int(max(ec.Spec.Replicas, 0)) {
		names = append(names, PodName(ec, i))
	}
	r := &rbacv1.Role{ObjectMeta: owned(ec, memberAccount(ec))}
	if len(names) > 0 {
		r.Rules = []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: names, Verbs: []string{"get", "update"}}}
	}
	return r
}

// MemberRoleBinding binds MemberRole to MemberAccount.
func MemberRoleBinding(ec *v1alpha1.EtcdCluster) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: owned(ec, memberAccount(ec)),
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: memberAccount(ec)},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: memberAccount(ec), Namespace: ec.Namespace}},
	}
}

// MemberLease is the Lease NAME-I of member pod i, which the pod's agent
// renews with holderIdentity MEMBERIDHEX:Leader|Member (DEP-01's member
// leases); the operator creates it (with no holder) and never writes its
// spec afterwards.
func MemberLease(ec *v1alpha1.EtcdCluster, i int) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: owned(ec, PodName(ec, i))}
}

// Secret is a Secret NAME of ec holding data.
func Secret(ec *v1alpha1.EtcdCluster, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: owned(ec, name), Type: corev1.SecretTypeOpaque, Data: data}
}

// DefaultTopologySpread spreads the member pods over zones and nodes: at
// most one more in any zone (node) than in another, preferred (a cluster
// without zone labels still schedules them).
func DefaultTopologySpread(ec *v1alpha1.EtcdCluster) []corev1.TopologySpreadConstraint {
	sel := &metav1.LabelSelector{MatchLabels: selectorLabels(ec)}
	return []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: sel},
		{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: sel},
	}
}

// AgentArgs are the member container's arguments: the agent in pod mode,
// joining with its own key of the join Secret the first time.
func AgentArgs() []string {
	return []string{
		"agent", "--dir", PodStewardDir,
		"--join", PodJoinDir + "/$(POD_NAME).yaml",
		"--listen-address", "$(POD_IP)",
		"--binary-store", PodBinaryStore,
		// The kubelet's probes (/livez, /readyz: a started voting member,
		// caught up, not stopped for an operation) and DEP-01's member
		// lease NAME-I, which the operator made and the agent renews.
		"--probe-address", "0.0.0.0:" + strconv.Itoa(ProbePort),
		"--lease", "$(POD_NAMESPACE)/$(POD_NAME)",
	}
}

// StatefulSet is the member pods' StatefulSet NAME: pods NAME-0..N-1
// created in parallel, each with its claim data-NAME-I mounted at
// /var/lib/steward, running `steward agent` in pod mode as MemberUID (not
// root) after the init container "prepare" made the volume that user's
// and copied the pod's own join file (PrepareArgs; docs/operator.md,
// Security).
//
// The readiness probe is the agent's /readyz: a pod is in NAME-client only
// while its member is a started voting member, caught up, not stopped or
// staged by an operation, so learners and rebuilt members get no client
// traffic. One check can take up to 3 s (the agent asks its member).
func StatefulSet(ec *v1alpha1.EtcdCluster, o PodOptions) *appsv1.StatefulSet {
	pull := o.PullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	size := DefaultStorageSize
	if ec.Spec.Storage.Size != nil {
		size = *ec.Spec.Storage.Size
	}
	spread := ec.Spec.Pod.TopologySpreadConstraints
	if len(spread) == 0 {
		spread = DefaultTopologySpread(ec)
	}
	replicas := ec.Spec.Replicas
	if o.Replicas != nil {
		replicas = *o.Replicas
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	mode := int32(0o400)
	joinSize := resource.MustParse("1Mi")
	prepare := PrepareArgs()
	mounts := []corev1.VolumeMount{
		{Name: DataVolume, MountPath: PodStewardDir},
		{Name: "join", MountPath: PodJoinDir, ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
	}
	initMounts := []corev1.VolumeMount{
		{Name: DataVolume, MountPath: PodStewardDir},
		{Name: "join-secret", MountPath: PodJoinSecretDir, ReadOnly: true},
		{Name: "join", MountPath: PodJoinDir},
	}
	volumes := []corev1.Volume{
		// Every pod's join file: the init container's only (root's,
		// 0400).
		{Name: "join-secret", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: joinSecret(ec), DefaultMode: &mode},
		}},
		// This pod's join file alone, in memory.
		{Name: "join", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &joinSize},
		}},
		// The root file system is read-only: the agent's and etcd's
		// scratch files (os.TempDir) go here.
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if b := ec.Spec.Backup; b != nil && b.Volume != nil {
		// The backup store on a claim (backupvolume.go): inside the data
		// volume's mount, where the spec's default store is; mounted in
		// the init container too, which makes it the member's user's.
		bm := corev1.VolumeMount{Name: BackupVolumeName, MountPath: PodBackupDir}
		mounts, initMounts = append(mounts, bm), append(initMounts, bm)
		prepare = append(prepare, PodBackupDir) // a file system of its own: named, not walked into
		volumes = append(volumes, corev1.Volume{Name: BackupVolumeName, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: b.Volume.ClaimName},
		}})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: owned(ec, ec.Name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         peerService(ec),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			// Pods are restarted by the operator, one member at a time
			// with leadership moved first, never by the StatefulSet.
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(ec)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: objectLabels(ec)},
				Spec: corev1.PodSpec{
					ServiceAccountName:        memberAccount(ec),
					Affinity:                  ec.Spec.Pod.Affinity,
					TopologySpreadConstraints: spread,
					PriorityClassName:         ec.Spec.Pod.PriorityClassName,
					NodeSelector:              ec.Spec.Pod.NodeSelector,
					Tolerations:               ec.Spec.Pod.Tolerations,
					SecurityContext:           MemberPodSecurityContext(),
					// Before the member: the volume made the member's
					// user, its join file copied (PrepareArgs).
					InitContainers: []corev1.Container{{
						Name:            "prepare",
						SecurityContext: PrepareSecurityContext(),
						Image:           o.Image,
						ImagePullPolicy: pull,
						Args:            prepare,
						Env:             []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name")},
						// The member's resources: the pod's requests and
						// limits stay the member's, and a namespace that
						// asks for limits gets them here too.
						Resources:    ec.Spec.Pod.Resources,
						VolumeMounts: initMounts,
					}},
					Containers: []corev1.Container{{
						Name:            "member",
						SecurityContext: MemberSecurityContext(),
						Image:           o.Image,
						ImagePullPolicy: pull,
						Args:            AgentArgs(),
						Env: []corev1.EnvVar{
							fieldEnv("POD_NAME", "metadata.name"),
							fieldEnv("POD_NAMESPACE", "metadata.namespace"),
							fieldEnv("POD_IP", "status.podIP"),
						},
						Ports: []corev1.ContainerPort{
							{Name: "client", ContainerPort: ClientPort},
							{Name: "peer", ContainerPort: PeerPort},
							{Name: "agent", ContainerPort: AgentPort},
							{Name: "probe", ContainerPort: ProbePort},
						},
						Resources: ec.Spec.Pod.Resources,
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(ProbePort)}},
							PeriodSeconds: 5, FailureThreshold: 2, TimeoutSeconds: 4,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(ProbePort)}},
							PeriodSeconds: 10, FailureThreshold: 6, TimeoutSeconds: 4,
						},
						VolumeMounts: mounts,
					}},
					Volumes: volumes,
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: DataVolume, Labels: objectLabels(ec)},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ec.Spec.Storage.StorageClassName,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
				},
			}},
		},
	}
}

// MemberUID and MemberGID are the user and group Steward and etcd run as in
// the member pods (and the operator in its own pod, deploy/operator):
// 65532, the "nonroot" user of distroless images and of kubebuilder's
// scaffolds, so a policy that knows that convention knows Steward's. It is
// no login or system user of a node (those sit far below), so a file a
// member leaves on a node's disk (a local volume) is no one's there; it is
// below 65534 (nobody) and fits a 16-bit ID, which every file system and
// user-namespace mapping holds. It is fixed, not configurable: a volume
// moved from one pod to another keeps its one owner.
const (
	MemberUID = 65532
	MemberGID = 65532
)

// MemberOwner is "MemberUID:MemberGID", the --owner of the init step.
var MemberOwner = fmt.Sprintf("%d:%d", MemberUID, MemberGID)

// MemberPodSecurityContext is the member pods' security context: every
// container runs as MemberUID:MemberGID and must not be root
// (runAsNonRoot), under the runtime's default seccomp profile; the init
// container alone overrides the user (PrepareSecurityContext).
//
// No fsGroup: the agent keeps its Steward directory, the data volume's
// root, owned by the user running it and 0700 (internal/dirmode), and
// its keys 0600. fsGroup gives the group, not the owner, and the kubelet
// then makes the volume's root group-writable (setgid) and, whenever the
// root does not match at a mount (fsGroupChangePolicy: OnRootMismatch)
// or at every mount (Always), every file group-readable and -writable:
// 0660 keys, and a root the agent makes 0700 again, so the next mount
// does it all over. The local `local` volumes of internal/localkube (and
// any `local` PersistentVolume) do honour fsGroup; hostPath volumes do
// not. The init container makes the volume the user's instead.
func MemberPodSecurityContext() *corev1.PodSecurityContext {
	uid, gid, t := int64(MemberUID), int64(MemberGID), true
	return &corev1.PodSecurityContext{
		RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &t,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// MemberSecurityContext is the member container's: the pod's user (not
// root), no privilege escalation, every capability dropped, a read-only
// root file system (the agent and etcd write only to the data volume and
// /tmp, an emptyDir). It meets the Pod Security Standard "restricted".
func MemberSecurityContext() *corev1.SecurityContext {
	f, t := false, true
	return &corev1.SecurityContext{
		RunAsNonRoot:             &t,
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   &t,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// PrepareSecurityContext is the init container's (PrepareArgs): root, as
// making a volume another user's takes, but with CAP_CHOWN as its only
// capability (no CAP_DAC_OVERRIDE, CAP_FOWNER: it reads only what root
// owns, changes no mode), no privilege escalation, a read-only root file
// system. It runs for a moment at each pod start, before the member
// container; it is why the pods meet the Pod Security Standard "baseline"
// (which allows CAP_CHOWN), not "restricted".
func PrepareSecurityContext() *corev1.SecurityContext {
	root, f, t := int64(0), false, true
	return &corev1.SecurityContext{
		RunAsUser: &root, RunAsGroup: &root, RunAsNonRoot: &f,
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   &t,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN"}},
	}
}

// PrepareArgs are the init container's arguments: the data volume made
// MemberUID's (at once on a new volume: its root; once, recursively, on
// a volume a root pod of an older operator wrote), and the pod's own join
// file copied out of the join Secret, 0600 and MemberUID's, into the
// in-memory emptyDir the member container reads it from.
func PrepareArgs() []string {
	return []string{
		"agent", "prepare-volume", "--owner", MemberOwner, PodStewardDir,
		"--copy", PodJoinSecretDir + "/$(POD_NAME).yaml=" + PodJoinDir + "/$(POD_NAME).yaml",
	}
}

// JoinKey is the key of pod i's join file in the join Secret.
func JoinKey(ec *v1alpha1.EtcdCluster, i int) string { return fmt.Sprintf("%s.yaml", PodName(ec, i)) }
