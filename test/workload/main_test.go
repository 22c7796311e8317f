package workload_test

import (
	"os"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// TestMain removes the steward build TestAgainstEtcd's harness made.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}
