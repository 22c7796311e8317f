// Package localkube_test runs a local Kubernetes (internal/localkube) of
// STEWARD_TEST_KUBE_NODES nodes (3 by default) shared by its tests, and
// checks that bringing one up and removing it leaves the machine as it was.
package localkube_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// childEnv marks a run of this test binary as a child of the cleanup
// tests: "1", a cluster of its own brought up by TestChildCluster and no
// shared one; "main", a one-node shared cluster (LocalKubeMain) that
// TestSignalDuringUp interrupts.
const childEnv = "LOCALKUBE_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "main":
		os.Exit(harness.LocalKubeMain(m, 1))
	default:
		os.Exit(m.Run())
	}
	nodes := 3
	if v := os.Getenv("STEWARD_TEST_KUBE_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			panic("STEWARD_TEST_KUBE_NODES: " + err.Error())
		}
		nodes = n
	}
	os.Exit(harness.LocalKubeMain(m, nodes))
}
