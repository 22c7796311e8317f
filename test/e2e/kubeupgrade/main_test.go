// Package kubeupgrade_test upgrades a local Kubernetes of three
// control-plane nodes (internal/localkube) from one known minor to the
// next with `steward kube upgrade apply`, on a cluster of its own: the
// shared clusters of test/e2e/localkube stay at their versions for the
// tests there.
package kubeupgrade_test

import (
	"os"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/test/harness"
)

// from and to are the versions upgraded: the two oldest of
// STEWARD_TEST_KUBE_VERSIONS, else the catalogue's two oldest.
var from, to string

func TestMain(m *testing.M) {
	var vs []string
	for _, v := range strings.FieldsFunc(os.Getenv("STEWARD_TEST_KUBE_VERSIONS"), func(r rune) bool { return r == ' ' || r == ',' }) {
		vs = append(vs, v)
	}
	if len(vs) < 2 {
		vs = kubeversion.KnownNames()
	}
	sortVersions(vs)
	from, to = vs[0], vs[1]
	// The package's one cluster runs the older version.
	_ = os.Setenv("STEWARD_TEST_KUBE_VERSION", from)
	os.Exit(harness.LocalKubeMainOneVersion(m, 3))
}

func sortVersions(vs []string) {
	for i := range vs {
		for j := i + 1; j < len(vs); j++ {
			a, errA := kubeversion.Parse(vs[i])
			b, errB := kubeversion.Parse(vs[j])
			if errA == nil && errB == nil && b.Compare(a) < 0 {
				vs[i], vs[j] = vs[j], vs[i]
			}
		}
	}
}
