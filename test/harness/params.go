package harness

import (
	"os"
	"testing"
	"time"
)

// EnvDuration reads the duration test parameter name from the environment
// (such as STEWARD_TEST_CERT_LIFETIME): def when it is unset.
func EnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}
