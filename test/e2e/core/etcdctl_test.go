package core_test

import (
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// TestEtcdctl: `steward etcdctl` runs etcdctl of the cluster's version
// against the cluster with no setup: the store's etcdctl (3.5 here), or
// the one linked into Steward when the store has none (a cluster of the
// embedded version on an empty store, as the README's demo); arguments
// passed through, etcdctl's exit code, the user's ETCDCTL_* variables and
// flags winning over Steward's.
func TestEtcdctl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, version string }{
		{"store", harness.Versions()[0]},
		{"linked", binaries.EmbeddedVersion()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			e.WriteSpec(1, tc.version, func(s *spec.Cluster) {
				if tc.name == "linked" {
					s.BinaryStore = "" // DIR/binaries: empty
				}
			})
			// up names the binary as it was run (the harness runs it by
			// its path), not a `steward` the shell may not find.
			if out := e.MustRun("up"); !strings.Contains(out, "etcdctl: "+e.Bin+" etcdctl --dir "+e.Dir) || !strings.Contains(out, e.Bin+" env --dir "+e.Dir) {
				t.Errorf("up does not name the binary as it was run (%s):\n%s", e.Bin, out)
			}
			if out := e.MustRun("etcdctl", "version"); !strings.Contains(out, "etcdctl version: "+tc.version) {
				t.Errorf("etcdctl version, want %s:\n%s", tc.version, out)
			}
			if out := e.MustRun("etcdctl", "put", "greeting", "hello"); strings.TrimSpace(out) != "OK" {
				t.Errorf("etcdctl put: %q", out)
			}
			if out := e.MustRun("etcdctl", "get", "greeting", "--print-value-only"); strings.TrimSpace(out) != "hello" {
				t.Errorf("etcdctl get: %q", out)
			}
			// The value arrived in the cluster itself.
			resp, err := e.Client().Get(t.Context(), "greeting")
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "hello" {
				t.Errorf("the put through steward etcdctl, read back: %v %v", resp, err)
			}
			// etcdctl's own exit code (128: a bad argument).
			_, se, err := e.Run("etcdctl", "get")
			if code := exitCodeOf(err); code != 128 {
				t.Errorf("etcdctl get with no key: exit code %d, want etcdctl's 128\n%s", code, se)
			}
			// The user's variable wins: an endpoint nobody serves fails.
			dead := e.URL("https", e.FreePorts(1)[0])
			if _, se, err := e.RunEnv([]string{"ETCDCTL_ENDPOINTS=" + dead, "ETCDCTL_DIAL_TIMEOUT=1s", "ETCDCTL_COMMAND_TIMEOUT=2s"}, "etcdctl", "get", "greeting"); err == nil {
				t.Errorf("etcdctl with ETCDCTL_ENDPOINTS=%s succeeded: the user's variable was overridden", dead)
			} else if !strings.Contains(se, strings.TrimPrefix(dead, "https://")) {
				t.Errorf("etcdctl with ETCDCTL_ENDPOINTS=%s: %s", dead, se)
			}
			// So does a flag (no "conflicting environment variable").
			ep := e.Spec().Members[0].ClientURL
			if out := e.MustRun("etcdctl", "--endpoints", ep, "endpoint", "health"); !strings.Contains(out, "is healthy") {
				t.Errorf("etcdctl --endpoints: %s", out)
			}
		})
	}
}

// TestUpgradePlanMissingBinary: `upgrade plan` runs the pre-flight checks
// of the whole path and shows a version missing from the binary store as a
// failed check (exit 1), as `upgrade apply` refuses it; before, the plan
// was shown clean and only apply failed.
func TestUpgradePlanMissingBinary(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, binaries.EmbeddedVersion(), func(s *spec.Cluster) { s.BinaryStore = "" })
	e.MustRun("up")
	so, se, err := e.Run("upgrade", "plan", "--to", "3.7.3")
	if exitCodeOf(err) != 1 {
		t.Errorf("upgrade plan to a version the store lacks: exit code %d, want 1\n%s%s", exitCodeOf(err), so, se)
	}
	// The table and the refusal name the command that imports it (the
	// command layer's words, after the library's "import it").
	advice := `is not the embedded version ` + binaries.EmbeddedVersion() + `: import it with "steward binaries import": etcd version not found`
	if !strings.Contains(so, "cluster-version") || !strings.Contains(so, "binaries") || !strings.Contains(so, "3.7.3 is not in the binary store") || !strings.Contains(so, advice) {
		t.Errorf("upgrade plan does not show the plan and its failed binaries check:\n%s", so)
	}
	if !strings.Contains(se, "would refuse") || !strings.Contains(se, "binaries: etcd 3.7.3 is not in the binary store") || !strings.Contains(se, advice) {
		t.Errorf("upgrade plan's error does not name the missing binary:\n%s", se)
	}
}
