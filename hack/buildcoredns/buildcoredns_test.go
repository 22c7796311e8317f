package buildcoredns

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProxyRefuses: on a machine whose Go module proxy refuses (here a
// proxy answering 403 to everything, and an empty module cache), the
// script exits 1 with one error naming the module and version and what to
// do, and leaves no binary or stamp behind.
func TestProxyRefuses(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forbidden by policy", http.StatusForbidden)
	}))
	t.Cleanup(proxy.Close)
	dir := t.TempDir()
	cache := filepath.Join(dir, "coredns")
	cmd := exec.CommandContext(t.Context(), "bash", "../build-coredns.sh")
	cmd.Env = append(os.Environ(),
		"COREDNS_VERSION=v1.14.2", "COREDNS_CACHE="+cache,
		"GOPROXY="+proxy.URL, "GOSUMDB=off", "GOMODCACHE="+filepath.Join(dir, "mod"),
		"GOFLAGS=-modcacherw")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("build-coredns.sh with a refusing proxy: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{
		"github.com/coredns/coredns@v1.14.2 is not available from the Go module proxy (" + proxy.URL + ")",
		"403 Forbidden",
		"COREDNS_VERSION",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"v1.14.2/bin/coredns", "v1.14.2/stamp"} {
		if _, err := os.Stat(filepath.Join(cache, f)); err == nil {
			t.Errorf("%s left behind by a failed build", f)
		}
	}
}

// TestBadVersion: a version that is not vX.Y.Z is refused before anything
// is downloaded (exit 2).
func TestBadVersion(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "bash", "../build-coredns.sh")
	cmd.Env = append(os.Environ(), "COREDNS_VERSION=latest", "COREDNS_CACHE="+t.TempDir(), "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "vlatest is not a CoreDNS release version") {
		t.Fatalf("COREDNS_VERSION=latest: %v, want exit status 2 naming the version\n%s", err, out)
	}
}
