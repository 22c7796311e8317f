package adopt

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// etcdBinary returns the etcd program of version v from $STEWARD_ETCD_CACHE
// or <repo>/.cache/etcd (make etcd-binaries), failing the test when it is
// missing.
func etcdBinary(t *testing.T, v string) string {
	t.Helper()
	cache := os.Getenv("STEWARD_ETCD_CACHE")
	if cache == "" {
		dir, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			if filepath.Dir(dir) == dir {
				t.Fatal("no go.mod above the working directory")
			}
			dir = filepath.Dir(dir)
		}
		cache = filepath.Join(dir, ".cache", "etcd")
	}
	p := filepath.Join(cache, "v"+v, "etcd")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("etcd %s missing (%v): run `make etcd-binaries` (or set STEWARD_ETCD_CACHE)", v, err)
	}
	return p
}

var helpFlag = regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`)

// TestEveryEtcdFlagKnown: every flag `etcd --help` of each line lists is
// one discovery knows, so a member running any of them is not refused as
// unknown; and BinaryVersion reads each binary's version.
func TestEveryEtcdFlagKnown(t *testing.T) {
	for _, v := range []string{"3.5.35", "3.6.16", "3.7.3"} {
		t.Run(v, func(t *testing.T) {
			bin := etcdBinary(t, v)
			out, _ := exec.CommandContext(t.Context(), bin, "--help").CombinedOutput()
			flags := helpFlag.FindAllStringSubmatch(string(out), -1)
			if len(flags) < 50 {
				t.Fatalf("etcd %s --help lists %d flags: %s", v, len(flags), out)
			}
			for _, f := range flags {
				if known, _ := knownFlag(f[1]); !known {
					t.Errorf("etcd %s has --%s, which discovery does not know", v, f[1])
				}
			}
			got, err := BinaryVersion(t.Context(), bin)
			if err != nil || got != v {
				t.Errorf("BinaryVersion = %q, %v; want %s", got, err, v)
			}
		})
	}
}
