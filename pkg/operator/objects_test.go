package operator

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

func testCluster() *v1alpha1.EtcdCluster {
	return &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod", UID: types.UID("uid-1"), Generation: 2},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: 3, Version: "3.6.16"},
	}
}

// Every object carries the controller owner reference that deletes it
// with its EtcdCluster, and the labels the design names.
func TestOwnedObjects(t *testing.T) {
	ec := testCluster()
	for _, m := range []metav1.ObjectMeta{
		PeerService(ec).ObjectMeta, ClientService(ec).ObjectMeta, DisruptionBudget(ec).ObjectMeta,
		MemberAccount(ec).ObjectMeta, MemberRole(ec).ObjectMeta, MemberRoleBinding(ec).ObjectMeta,
		StatefulSet(ec, PodOptions{Image: "steward:x"}).ObjectMeta, Secret(ec, "db-ca", nil).ObjectMeta,
	} {
		if m.Namespace != "prod" || len(m.OwnerReferences) != 1 {
			t.Fatalf("%s: namespace %q, owners %v", m.Name, m.Namespace, m.OwnerReferences)
		}
		o := m.OwnerReferences[0]
		if o.UID != "uid-1" || o.Kind != "EtcdCluster" || o.APIVersion != "steward.etcd.io/v1alpha1" || o.Controller == nil || !*o.Controller {
			t.Errorf("%s: owner %+v", m.Name, o)
		}
		for k, v := range map[string]string{LabelName: "etcd", LabelInstance: "db", LabelManagedBy: "steward", LabelCluster: "db"} {
			if m.Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", m.Name, k, m.Labels[k], v)
			}
		}
	}
}

func TestServices(t *testing.T) {
	ec := testCluster()
	p := PeerService(ec)
	if p.Name != "db-peer" || p.Spec.ClusterIP != corev1.ClusterIPNone || !p.Spec.PublishNotReadyAddresses {
		t.Errorf("peer service: %s %q publishNotReady=%v", p.Name, p.Spec.ClusterIP, p.Spec.PublishNotReadyAddresses)
	}
	var ports []int32
	for _, sp := range p.Spec.Ports {
		ports = append(ports, sp.Port)
	}
	if !slices.Equal(ports, []int32{2380, 2378}) {
		t.Errorf("peer ports %v", ports)
	}
	c := ClientService(ec)
	if c.Name != "db-client" || c.Spec.ClusterIP != "" || len(c.Spec.Ports) != 1 || c.Spec.Ports[0].Port != 2379 {
		t.Errorf("client service: %+v", c.Spec)
	}
	if Selector(ec) != "app.kubernetes.io/instance=db,app.kubernetes.io/name=etcd,steward.etcd.io/cluster=db" {
		t.Errorf("selector %q", Selector(ec))
	}
	if pdb := DisruptionBudget(ec); pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("pdb %+v", pdb.Spec)
	}
}

// The StatefulSet: parallel pods of the agent in pod mode, the downward
// API's names, its own join key, the claim of the spec's size, the
// default spread over zones and nodes.
func TestStatefulSet(t *testing.T) {
	ec := testCluster()
	ss := StatefulSet(ec, PodOptions{Image: "steward.etcd.io/steward:v1"})
	if ss.Name != "db" || *ss.Spec.Replicas != 3 || ss.Spec.ServiceName != "db-peer" || ss.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("statefulset %s replicas %d service %s policy %s", ss.Name, *ss.Spec.Replicas, ss.Spec.ServiceName, ss.Spec.PodManagementPolicy)
	}
	if ss.Spec.UpdateStrategy.Type != "OnDelete" {
		t.Errorf("update strategy %s: the StatefulSet would restart members by itself", ss.Spec.UpdateStrategy.Type)
	}
	pod := ss.Spec.Template.Spec
	if pod.ServiceAccountName != "db-member" || len(pod.Containers) != 1 {
		t.Fatalf("pod %+v", pod)
	}
	ct := pod.Containers[0]
	if ct.Image != "steward.etcd.io/steward:v1" || ct.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s", ct.Image, ct.ImagePullPolicy)
	}
	args := strings.Join(ct.Args, " ")
	if args != "agent --dir /var/lib/steward --join /etc/steward/join/$(POD_NAME).yaml --listen-address $(POD_IP) --binary-store /opt/steward/binaries --probe-address 0.0.0.0:8080 --lease $(POD_NAMESPACE)/$(POD_NAME)" {
		t.Errorf("args %q", args)
	}
	env := map[string]string{}
	for _, e := range ct.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_IP"] != "status.podIP" {
		t.Errorf("env %v", env)
	}
	if p := ct.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != 8080 || p.TimeoutSeconds < 3 {
		t.Errorf("readiness probe %+v", ct.ReadinessProbe)
	}
	if p := ct.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/livez" || p.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("liveness probe %+v", ct.LivenessProbe)
	}
	mounts := map[string]string{}
	for _, m := range ct.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["data"] != "/var/lib/steward" || mounts["join"] != "/etc/steward/join" {
		t.Errorf("mounts %v", mounts)
	}
	if len(pod.Volumes) != 3 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "db-join" || pod.Volumes[1].EmptyDir == nil {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	// The init container: the same image and pull policy (the resource's
	// pull policy below too).
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Image != ct.Image || pod.InitContainers[0].ImagePullPolicy != ct.ImagePullPolicy {
		t.Errorf("init containers %+v", pod.InitContainers)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 {
		t.Fatal("no claim template")
	}
	ct0 := ss.Spec.VolumeClaimTemplates[0]
	if q := ct0.Spec.Resources.Requests[corev1.ResourceStorage]; ct0.Name != "data" || q.String() != "8Gi" {
		t.Errorf("claim %s %s", ct0.Name, q.String())
	}
	var keys []string
	for _, c := range pod.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
		if c.MaxSkew != 1 || c.LabelSelector == nil || c.LabelSelector.MatchLabels[LabelInstance] != "db" {
			t.Errorf("spread %+v", c)
		}
	}
	if !slices.Equal(keys, []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}) {
		t.Errorf("spread keys %v", keys)
	}

	// The resource's own settings win.
	size := resource.MustParse("20Gi")
	class := "fast"
	ec.Spec.Storage = v1alpha1.Storage{Size: &size, StorageClassName: &class}
	ec.Spec.Pod.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack"}}
	ss = StatefulSet(ec, PodOptions{Image: "i", PullPolicy: corev1.PullNever})
	ct0 = ss.Spec.VolumeClaimTemplates[0]
	if q := ct0.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "20Gi" || *ct0.Spec.StorageClassName != "fast" {
		t.Errorf("claim %s %v", q.String(), ct0.Spec.StorageClassName)
	}
	if c := ss.Spec.Template.Spec.TopologySpreadConstraints; len(c) != 1 || c[0].TopologyKey != "rack" {
		t.Errorf("spread %v", c)
	}
	if ss.Spec.Template.Spec.Containers[0].ImagePullPolicy != corev1.PullNever || ss.Spec.Template.Spec.InitContainers[0].ImagePullPolicy != corev1.PullNever {
		t.Error("pull policy not taken")
	}
}

func TestMemberRole(t *testing.T) {
	ec := testCluster()
	r := MemberRole(ec)
	if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].ResourceNames, []string{"db-0", "db-1", "db-2"}) ||
		!slices.Equal(r.Rules[0].Verbs, []string{"get", "update"}) || r.Rules[0].Resources[0] != "leases" {
		t.Errorf("role %+v", r.Rules)
	}
	ec.Spec.Replicas = 0
	if r := MemberRole(ec); len(r.Rules) != 0 {
		t.Errorf("a hibernated cluster's role grants %v", r.Rules)
	}
	b := MemberRoleBinding(ec)
	if b.RoleRef.Name != "db-member" || b.Subjects[0].Name != "db-member" || b.Subjects[0].Namespace != "prod" {
		t.Errorf("binding %+v", b)
	}
}
