package bench

import (
	"os"
	"testing"

	"github.com/etcd-steward/steward/test/harness"
)

// TestMain builds steward without the race detector, whatever
// STEWARD_TEST_RACE says: the benchmarks measure Steward's speed, and a
// race-built binary is several times slower. (The end-to-end tests run a
// race-built steward.)
func TestMain(m *testing.M) {
	harness.Race = false
	os.Exit(harness.Main(m))
}
