package buildetcd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsEveryBuiltVersion: a version that fails does not stop the
// others; every version built is imported and the script exits 1 naming
// the failed one. Before, the script stopped at the first failure and
// imported none of the versions it had built. The builds are faked by a
// cache whose binaries already report their versions (the script skips
// building those), the import by a steward that records its arguments.
func TestImportsEveryBuiltVersion(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	for _, v := range []string{"3.5.35", "3.7.3"} {
		d := filepath.Join(cache, "v"+v)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
			script := "#!/bin/sh\necho 'etcd Version: " + v + "'\n"
			if err := os.WriteFile(filepath.Join(d, tool), []byte(script), 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	log := filepath.Join(dir, "imports")
	steward := filepath.Join(dir, "steward")
	if err := os.WriteFile(steward, []byte("#!/bin/sh\necho \"$@\" >> "+log+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "../build-etcd.sh", "v3.5.35", "v3.99", "3.7.3")
	cmd.Env = append(os.Environ(), "CACHE="+cache, "STORE="+filepath.Join(dir, "store"), "STEWARD="+steward, "NO_IMPORT=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("build-etcd.sh with a failing version: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "build-etcd: failed: v3.99") {
		t.Errorf("the failed version is not named at the end:\n%s", out)
	}
	b, _ := os.ReadFile(log)
	for _, v := range []string{"v3.5.35", "v3.7.3"} {
		if !strings.Contains(string(b), "binaries import --store "+filepath.Join(dir, "store")+" --version "+v+" ") {
			t.Errorf("%s was built but not imported; imports:\n%s\noutput:\n%s", v, b, out)
		}
	}
}
