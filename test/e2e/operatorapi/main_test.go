// Package operatorapi tests the operator's API and install manifests
// (api/v1alpha1, deploy/operator) against a real kube-apiserver over a
// Steward etcd, driven by the kubectl of the same Kubernetes version: the
// kustomize base installs and uninstalls, EtcdClusters get their schema
// defaults, every refusal of bad input is kubectl's one message with
// nothing stored, the scale subresource, kubectl explain and the printer
// columns (docs/operator.md). No operator runs: the API alone is tested.
package operatorapi_test

import (
	"os"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// TestMain removes the steward build the tests share once they are done.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}
