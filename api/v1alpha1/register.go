package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the EtcdCluster resource.
var GroupVersion = schema.GroupVersion{Group: "steward.etcd.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types of this package in a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds them to a scheme (controller-runtime's client, the
	// operator's manager).
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &EtcdCluster{}, &EtcdClusterList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
