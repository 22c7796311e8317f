// Package v1alpha1 is the Kubernetes API of Steward's operator: the
// EtcdCluster custom resource (group steward.etcd.io, the group of the
// hosts' spec file's apiVersion). Its field names follow the hosts' spec
// (pkg/spec) where they mean the same thing, so a user moving a cluster
// between hosts and pods reads the same words.
//
// The CustomResourceDefinition under deploy/operator/crd is generated from
// these types by controller-gen (`make generate`); the markers on each
// field are its schema validation. What the schema cannot say (steps
// between versions, quorum) the operator checks and reports in a condition.
//
// +kubebuilder:object:generate=true
// +groupName=steward.etcd.io
package v1alpha1
