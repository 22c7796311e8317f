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
// /var/lib/steward, running `steward agent` in pod mode.
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
	mounts := []corev1.VolumeMount{
		{Name: DataVolume, MountPath: PodStewardDir},
		{Name: "join", MountPath: PodJoinDir, ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
	}
	volumes := []corev1.Volume{
		{Name: "join", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: joinSecret(ec), DefaultMode: &mode},
		}},
		// The root file system is read-only: the agent's and etcd's
		// scratch files (os.TempDir) go here.
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if b := ec.Spec.Backup; b != nil && b.Volume != nil {
		// The backup store on a claim (backupvolume.go): inside the data
		// volume's mount, where the spec's default store is.
		mounts = append(mounts, corev1.VolumeMount{Name: BackupVolumeName, MountPath: PodBackupDir})
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

// MemberPodSecurityContext is the member pods' security context: the
// runtime's default seccomp profile. The pods run as root (uid 0) with no
// capability, not as another user: the agent keeps its directory, the
// volume's root, 0700 and its own (internal/dirmode refuses one owned by
// another user or under a directory others can write), and a volume's
// root is root's (a cloud disk's file system, 0755) or root's and
// world-writable (the local-path provisioners', 0777); fsGroup would make
// every key on the volume group-readable and the root group-writable at
// each mount (docs/operator.md, Security).
func MemberPodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// MemberSecurityContext is the member container's: no privilege
// escalation, every capability dropped (root without CAP_DAC_OVERRIDE,
// CAP_CHOWN, CAP_FOWNER: it reaches only its own files), a read-only root
// file system (the agent and etcd write only to the data volume and
// /tmp, an emptyDir).
func MemberSecurityContext() *corev1.SecurityContext {
	f := false
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   func() *bool { t := true; return &t }(),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// JoinKey is the key of pod i's join file in the join Secret.
func JoinKey(ec *v1alpha1.EtcdCluster, i int) string { return fmt.Sprintf("%s.yaml", PodName(ec, i)) }
