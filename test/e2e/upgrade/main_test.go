package upgrade_test

import (
	"os"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// TestMain removes the steward build the tests share once they are done.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}
