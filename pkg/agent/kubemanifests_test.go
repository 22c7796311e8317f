package agent

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// TestKubeManifests: an agent given a manifests directory reports the
// capability, reads a manifest, writes one atomically keeping the one
// before the plan (once per plan: a second write keeps the original), a
// write of the same content changes nothing, the kept copies go only when
// asked; bad names and plan IDs are refused before anything is touched;
// an agent without the directory says so and reports no capability.
func TestKubeManifests(t *testing.T) {
	root := t.TempDir()
	man := filepath.Join(root, "manifests")
	if err := os.MkdirAll(man, 0o700); err != nil {
		t.Fatal(err)
	}
	old := []byte("image: registry.k8s.io/kube-apiserver:v1.35.4\n")
	if err := os.WriteFile(filepath.Join(man, "kube-apiserver.yaml"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Dir: filepath.Join(root, "steward"), KubeManifests: man, Log: slog.New(slog.DiscardHandler)})
	srv, c := unixServer(t, a)
	ctx := t.Context()
	info, err := c.Info(ctx)
	if err != nil || !strings.Contains(strings.Join(info.Capabilities, ","), agentapi.CapKubeManifests) {
		t.Fatalf("info %+v, %v", info, err)
	}
	m, err := c.KubeManifest(ctx, "kube-apiserver")
	if err != nil || string(m.Content) != string(old) {
		t.Fatalf("manifest %+v, %v", m, err)
	}
	const plan = "kube-upgrade-20261128T070000Z"
	v1 := []byte("image: registry.k8s.io/kube-apiserver:v1.36.3\n")
	w, err := c.PutKubeManifest(ctx, "kube-apiserver", plan, v1)
	if err != nil || !w.Changed || w.Kept == "" {
		t.Fatalf("put %+v, %v", w, err)
	}
	if b, _ := os.ReadFile(filepath.Join(man, "kube-apiserver.yaml")); string(b) != string(v1) {
		t.Errorf("manifest %q", b)
	}
	if fi, err := os.Stat(filepath.Join(man, "kube-apiserver.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("manifest mode %v, %v", fi, err)
	}
	if w, err := c.PutKubeManifest(ctx, "kube-apiserver", plan, v1); err != nil || w.Changed {
		t.Errorf("same content again: %+v, %v", w, err)
	}
	if _, err := c.PutKubeManifest(ctx, "kube-apiserver", plan, []byte("image: other\n")); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(root, "steward", KeptManifestsDir, plan, "kube-apiserver.yaml")
	if b, err := os.ReadFile(kept); err != nil || string(b) != string(old) {
		t.Errorf("kept %q, %v: want the manifest before the plan", b, err)
	}
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kept file %v, %v: want 0600", fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(kept)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("kept dir %v, %v", fi, err)
	}
	if k, ok, err := c.KubeManifestKept(ctx, plan, "kube-apiserver"); err != nil || !ok || string(k.Content) != string(old) || k.Path != kept {
		t.Errorf("GET kept: %+v, %v, %v: want the manifest before the plan", k, ok, err)
	}
	if _, ok, err := c.KubeManifestKept(ctx, plan, "kube-scheduler"); err != nil || ok {
		t.Errorf("GET kept of a manifest the plan never wrote: %v, %v: want none", ok, err)
	}
	if _, ok, err := c.KubeManifestKept(ctx, "other-plan", "kube-apiserver"); err != nil || ok {
		t.Errorf("GET kept of another plan: %v, %v: want none", ok, err)
	}
	ents, _ := os.ReadDir(man)
	if len(ents) != 1 {
		t.Errorf("manifests dir holds %v: no temporary file may stay", ents)
	}
	for _, bad := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/kube/manifests/..%2Fx?plan=" + plan, "x"},
		{http.MethodPut, "/v1/kube/manifests/Kube?plan=" + plan, "x"},
		{http.MethodPut, "/v1/kube/manifests/kube-apiserver?plan=..", "x"},
		{http.MethodPut, "/v1/kube/manifests/kube-apiserver?plan=a%2Fb", "x"},
		{http.MethodPut, "/v1/kube/manifests/kube-apiserver?plan=" + plan, ""},
		// Escaped: a literal /.. is cleaned by the router (404 here)
		// before the handler sees it.
		{http.MethodDelete, "/v1/kube/kept/%2E%2E", ""},
		{http.MethodGet, "/v1/kube/kept/%2E%2E/kube-apiserver", ""},
		{http.MethodGet, "/v1/kube/kept/" + plan + "/..%2Fx", ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, bad.method, srv.URL+bad.path, strings.NewReader(bad.body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: %d, want 400", bad.method, bad.path, resp.StatusCode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(man, "kube-apiserver.yaml")); string(b) != "image: other\n" {
		t.Errorf("a refused write changed the manifest: %q", b)
	}
	if err := c.DeleteKubeManifestsKept(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(kept)); !os.IsNotExist(err) {
		t.Errorf("kept dir after delete: %v", err)
	}
	if _, ok, err := c.KubeManifestKept(ctx, plan, "kube-apiserver"); err != nil || ok {
		t.Errorf("GET kept after delete: %v, %v", ok, err)
	}

	none := New(Options{Dir: filepath.Join(root, "steward2"), Log: slog.New(slog.DiscardHandler)})
	_, c2 := unixServer(t, none)
	if info, _ := c2.Info(ctx); strings.Contains(strings.Join(info.Capabilities, ","), agentapi.CapKubeManifests) {
		t.Errorf("capabilities %v without a manifests directory", info.Capabilities)
	}
	if _, err := c2.KubeManifest(ctx, "kube-apiserver"); err == nil || !strings.Contains(err.Error(), ErrNoKubeManifests.Error()) {
		t.Errorf("no directory: %v", err)
	}
}

// unixServer serves a's handler on a Unix socket, as Run does, and returns
// the test server (for raw requests) and an agent client of the socket.
func unixServer(t *testing.T, a *Agent) (*httptest.Server, *agentapi.Client) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	srv.URL = "http://agent"
	srv.Client().Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	c, err := agentapi.NewClient("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}
