package kubeupgrade

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
)

// serveAgent runs an agent's API on a Unix socket and returns its
// address (unix://PATH).
func serveAgent(t *testing.T, o agent.Options) string {
	t.Helper()
	o.Log = slog.New(slog.DiscardHandler)
	a := agent.New(o)
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "unix://" + sock
}

// TestCheckAgents: apply refuses, before anything is recorded, a host
// whose agent was not given its manifests directory, and a host with no
// agent in the spec, each naming the host; an agent with the directory
// passes.
func TestCheckAgents(t *testing.T) {
	good := t.TempDir()
	writeManifest(t, good, "kube-apiserver", goodManifest)
	with := serveAgent(t, agent.Options{Dir: t.TempDir(), KubeManifests: good})
	without := serveAgent(t, agent.Options{Dir: t.TempDir()})
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: []spec.Agent{
		{Name: "node-a", Address: with}, {Name: "node-c", Address: with}, {Name: "node-b", Address: without},
	}}}
	comps := func(hosts ...string) []PlannedComponent {
		var out []PlannedComponent
		for _, h := range hosts {
			out = append(out, PlannedComponent{Host: h, Component: "kube-apiserver", ToImage: "registry.k8s.io/kube-apiserver:v1.36.3"})
		}
		return out
	}
	if err := checkAgents(t.Context(), c, comps("node-a", "node-c")); err != nil {
		t.Errorf("agents with the directory: %v", err)
	}
	err := checkAgents(t.Context(), c, comps("node-a", "node-b"))
	if !errors.Is(err, ErrNoManifestsDir) || !strings.Contains(err.Error(), "host node-b: its Steward agent node-b does not know the host's static pod manifests directory") {
		t.Errorf("an agent without the directory: %v", err)
	}
	err = checkAgents(t.Context(), c, comps("node-x"))
	if !errors.Is(err, ErrNoManifestsDir) || !strings.Contains(err.Error(), "host node-x: no Steward agent") {
		t.Errorf("a host with no agent: %v", err)
	}
}

const goodManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --secure-port=6443
    image: registry.k8s.io/kube-apiserver:v1.35.4
    name: kube-apiserver
`

func writeManifest(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckAgentsReadsManifests: apply reads and rewrites every planned
// manifest before anything is recorded: a host whose manifest is
// missing, or has a field the pod type does not know, is refused naming
// the host and what to do; nothing is written on any host.
func TestCheckAgentsReadsManifests(t *testing.T) {
	good, missing, bad := t.TempDir(), t.TempDir(), t.TempDir()
	writeManifest(t, good, "kube-apiserver", goodManifest)
	writeManifest(t, bad, "kube-apiserver", strings.Replace(goodManifest, "  containers:", "  notAField: 1\n  containers:", 1))
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Agents: []spec.Agent{
		{Name: "node-a", Address: serveAgent(t, agent.Options{Dir: t.TempDir(), KubeManifests: good})},
		{Name: "node-b", Address: serveAgent(t, agent.Options{Dir: t.TempDir(), KubeManifests: missing})},
		{Name: "node-c", Address: serveAgent(t, agent.Options{Dir: t.TempDir(), KubeManifests: bad})},
	}}}
	pc := func(h string) PlannedComponent {
		return PlannedComponent{Host: h, Component: "kube-apiserver", ToImage: "registry.k8s.io/kube-apiserver:v1.36.3"}
	}
	if err := checkAgents(t.Context(), c, []PlannedComponent{pc("node-a")}); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
	err := checkAgents(t.Context(), c, []PlannedComponent{pc("node-a"), pc("node-b")})
	if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "host node-b: read its kube-apiserver manifest") || !strings.Contains(err.Error(), "then apply again") {
		t.Errorf("a missing manifest: %v", err)
	}
	err = checkAgents(t.Context(), c, []PlannedComponent{pc("node-a"), pc("node-c")})
	if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), "host node-c:") || !strings.Contains(err.Error(), "notAField") || !strings.Contains(err.Error(), "fix that manifest") {
		t.Errorf("a manifest with an unknown field: %v", err)
	}
	for _, d := range []string{good, bad} {
		if b, _ := os.ReadFile(filepath.Join(d, "kube-apiserver.yaml")); !strings.Contains(string(b), "v1.35.4") {
			t.Errorf("%s changed: %s", d, b)
		}
	}
}

// TestHashesOfPartialDiscovery: a partial discovery failure (an
// aggregated API not answering) fails, naming the group: a resource
// whose hash is not recorded would never be migrated.
func TestHashesOfPartialDiscovery(t *testing.T) {
	lists := []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Namespaced: true, Verbs: []string{"get", "list", "update"}, StorageVersionHash: "h1"},
	}}}
	got, err := hashesOf(lists, nil)
	if err != nil || got["configmaps"] != "h1" {
		t.Fatalf("whole discovery: %v %v", got, err)
	}
	partial := &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
		{Group: "metrics.k8s.io", Version: "v1beta1"}: errors.New("the server is currently unable to handle the request"),
	}}
	got, err = hashesOf(lists, partial)
	if !errors.Is(err, ErrPartialDiscovery) || !strings.Contains(err.Error(), "metrics.k8s.io/v1beta1") || !strings.Contains(err.Error(), "then try again") || got != nil {
		t.Errorf("partial discovery: %v %v", got, err)
	}
}

// TestAPIServerVersionInPieces: /version is read whole, however the body
// arrives (here in two flushed pieces, which one Read would cut).
func TestAPIServerVersionInPieces(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		_, _ = io.WriteString(w, `{"major": "1", "minor": "36", `)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // the second piece after the first was read
		_, _ = io.WriteString(w, `"gitVersion": "v1.36.3"}`)
	}))
	t.Cleanup(srv.Close)
	e := &env{cfg: &rest.Config{Host: srv.URL}}
	v, ready, err := e.APIServer(t.Context(), APIServer{Host: "node-a", URL: srv.URL})
	if err != nil || v != "v1.36.3" || !ready {
		t.Errorf("got %q %v %v", v, ready, err)
	}
}
