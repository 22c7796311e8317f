package harness

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/status"
)

// Minor returns the minor version of an etcd version: "3.6" of "3.6.16".
func Minor(v string) string {
	p := strings.Split(v, ".")
	return p[0] + "." + p[1]
}

// RequireVersion fails unless every member runs version.
func RequireVersion(t *testing.T, st *status.Status, version, when string) {
	t.Helper()
	for _, m := range st.Members {
		if m.Version != version {
			t.Fatalf("%s %s runs %s, want %s", when, m.Name, m.Version, version)
		}
	}
}
