// Package operator_test runs Steward's Kubernetes operator against a local
// Kubernetes of three nodes in three zones (internal/localkube, cluster DNS
// included), shared by the package's tests: one cluster, of
// harness.LocalKubeVersion, whatever STEWARD_TEST_KUBE_VERSIONS lists (the
// operator's behaviour does not depend on the version beneath it).
//
// The operator runs as a pod of that cluster, installed from
// deploy/operator with a Steward image the tests build from this checkout
// (operatorfixture.StewardImage), not as a process of the test: it reaches the member pods by their DNS names
// (NAME-I.NAME-peer.NAMESPACE.svc.cluster.local), which only the cluster's
// DNS resolves, at pod IPs only the nodes route to. The fixtures (images,
// the operator's installation, EtcdClusters, clients, the writer and the
// checker, the operator's resource use) are test/operatorfixture's, which
// the operator's benchmarks (test/bench/operator) share.
package operator_test

import (
	"os"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.LocalKubeMainOneVersion(m, 3)) }
