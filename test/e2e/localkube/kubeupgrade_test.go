package localkube_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/test/harness"
)

// stewardKube runs `steward ARGS` against the cluster's Steward directory
// with no KUBECONFIG (so the local Kubernetes' kubeconfig beside it is
// the one chosen) and returns stdout, stderr and the error.
func stewardKube(t *testing.T, c *localkube.Cluster, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), c.Steward, args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBECONFIG=") && !strings.HasPrefix(e, "STEWARD_DIR=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "STEWARD_DIR="+c.StewardDir)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func kubeCaches(t *testing.T) (kubeCache, images string) {
	root := harness.RepoRoot(t)
	kubeCache, images = os.Getenv("STEWARD_KUBE_CACHE"), os.Getenv("STEWARD_IMAGES")
	if kubeCache == "" {
		kubeCache = filepath.Join(root, ".cache", "kube")
	}
	if images == "" {
		images = filepath.Join(root, ".cache", "images")
	}
	return kubeCache, images
}

// TestKubeVersionsAndUpgradePlan: `steward kube versions` shows the
// cluster's version active on every host and component and the other
// known version available (its binaries and images are in the caches the
// cluster came from); `steward kube upgrade plan --to` the next minor's
// release passes every pre-flight check against the live cluster and
// lists every host and component; a target outside the catalogue and a
// downgrade are refused, non-zero, with nothing changed. (No API that
// 1.36 removes is served by 1.35 without alpha runtime-config, which
// localkube's API servers do not enable, so the removed-API refusal is
// proved by kubeversion's TestBuildPlanRefusals on the inventory's own
// report shape.)
func TestKubeVersionsAndUpgradePlan(t *testing.T) {
	harness.ForEachLocalKube(t, kubeVersionsAndUpgradePlan)
}

func kubeVersionsAndUpgradePlan(t *testing.T, c *localkube.Cluster) {
	kubeCache, images := kubeCaches(t)
	cur, err := kubeversion.Parse(c.Version)
	if err != nil {
		t.Fatal(err)
	}
	var versions struct {
		Kubeconfig struct{ Path, Source string } `json:"kubeconfig"`
		Versions   []kubeversion.VersionState    `json:"versions"`
		Hosts      []struct {
			Host       string                 `json:"host"`
			Components []kubeversion.Instance `json:"components"`
		} `json:"hosts"`
	}
	readVersions := func() {
		out, stderr, err := stewardKube(t, c, "kube", "versions", "--kube-cache", kubeCache, "--images", images, "-o", "json")
		if err != nil {
			t.Fatalf("kube versions: %v: %s%s", err, out, stderr)
		}
		if err := json.Unmarshal([]byte(out), &versions); err != nil {
			t.Fatalf("kube versions: %v: %s", err, out)
		}
		if versions.Kubeconfig.Path != c.Kubeconfig || versions.Kubeconfig.Source != "localkube" || !strings.Contains(stderr, "kubeconfig "+c.Kubeconfig+" (the local Kubernetes") {
			t.Errorf("kubeconfig chosen %+v, stderr %q; want the local Kubernetes' %s", versions.Kubeconfig, stderr, c.Kubeconfig)
		}
	}
	// Ready nodes may not have registered every static pod's mirror pod
	// yet: until they have, the version is partial (a component with no
	// version); wait for active.
	components := 4 * len(c.Nodes)
	states := map[string]kubeversion.VersionState{}
	harness.Eventually(t, 2*time.Minute, 500*time.Millisecond, c.Version+" active on every component", func() error {
		readVersions()
		states = map[string]kubeversion.VersionState{}
		for _, v := range versions.Versions {
			states[v.Version] = v
		}
		if s := states[c.Version]; s.State != kubeversion.StateActive || s.Running != components || s.Components != components || len(s.Hosts) != len(c.Nodes) {
			return fmt.Errorf("%+v, want active on all %d components of %d hosts (hosts %+v)", s, components, len(c.Nodes), versions.Hosts)
		}
		return nil
	})
	for _, k := range kubeversion.Known() {
		if k.Version == c.Version {
			continue
		}
		if s := states[k.Version]; s.State != kubeversion.StateAvailable || s.Running != 0 {
			t.Errorf("%s: %+v, want available (binaries in %s, images in %s)", k.Version, s, kubeCache, images)
		}
	}
	if len(versions.Hosts) != len(c.Nodes) {
		t.Fatalf("hosts %+v, want %d", versions.Hosts, len(c.Nodes))
	}
	for i, h := range versions.Hosts {
		if h.Host != c.Nodes[i].Name || len(h.Components) != 4 {
			t.Errorf("host %d: %+v", i, h)
		}
		for _, in := range h.Components {
			if in.Version != c.Version || (in.Component != kubeversion.Kubelet && in.Image != localkube.DefaultImageRepo+"/"+in.Component+":"+c.Version) {
				t.Errorf("host %s: %+v", h.Host, in)
			}
		}
	}

	// The dry run to the next minor's known release, if there is one.
	if next, ok := kubeversion.NewestOfMinor(cur.Major, cur.Minor+1); ok {
		out, stderr, err := stewardKube(t, c, "kube", "upgrade", "plan", "--to", next.Version, "-o", "json")
		if err != nil {
			t.Fatalf("kube upgrade plan --to %s: %v: %s%s", next.Version, err, out, stderr)
		}
		var p kubeversion.Plan
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, ck := range p.Preflight {
			if ck.Result != kubeversion.Pass {
				t.Errorf("pre-flight %s: %s: %s", ck.Name, ck.Result, ck.Message)
			}
		}
		var names []string
		for _, ck := range p.Preflight {
			names = append(names, ck.Name)
		}
		for _, want := range []string{"skew", "path", "kubelets", "removed-apis", "etcd-version", "etcd-health", "alarms", "apiservers-ready", "certificates"} {
			if !slices.Contains(names, want) {
				t.Errorf("no %s pre-flight check: %v", want, names)
			}
		}
		if len(p.Hosts) != len(c.Nodes) {
			t.Fatalf("plan hosts %+v", p.Hosts)
		}
		for i, h := range p.Hosts {
			if h.Host != c.Nodes[i].Name || len(h.Components) != 4 {
				t.Errorf("plan host %d: %+v", i, h)
			}
			for j, cp := range h.Components {
				if cp.Component != kubeversion.Components[j] || !cp.Changes || cp.FromVersion != c.Version || cp.ToVersion != next.Version {
					t.Errorf("plan %s: %+v", h.Host, cp)
				}
				if cp.Component != kubeversion.Kubelet && (cp.FromImage != localkube.DefaultImageRepo+"/"+cp.Component+":"+c.Version || cp.ToImage != next.Images[cp.Component]) {
					t.Errorf("plan %s: images %s -> %s", h.Host, cp.FromImage, cp.ToImage)
				}
			}
		}
		if p.Etcd.Needed || p.Etcd.Running == "" {
			t.Errorf("etcd step %+v: the Steward cluster's etcd is newer than %s's %s", p.Etcd, next.Version, next.EtcdVersion)
		}
		// The table form too.
		if out, stderr, err := stewardKube(t, c, "kube", "upgrade", "plan", "--to", next.Version); err != nil || !strings.Contains(out, "PRE-FLIGHT") || !strings.Contains(out, "upgrading-first-control-plane") {
			t.Errorf("table: %v: %s%s", err, out, stderr)
		}
	}

	// Refusals: one message each, non-zero, nothing changed.
	refused := func(target, says string) {
		t.Helper()
		out, stderr, err := stewardKube(t, c, "kube", "upgrade", "plan", "--to", target)
		if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(stderr, says) {
			t.Errorf("plan --to %s: %v, stderr %q, want refused saying %q (stdout %s)", target, err, stderr, says, out)
		}
	}
	refused("v1.37.0", "Kubernetes v1.37.0 is not in Steward's catalogue of versions (known: "+strings.Join(kubeversion.KnownNames(), ", ")+"): pick one of those; `steward kube versions` lists")
	if prev, ok := kubeversion.NewestOfMinor(cur.Major, cur.Minor-1); ok {
		refused(prev.Version, "never goes backwards")
	}
	before := versions.Hosts
	readVersions()
	for i := range before {
		if !slices.EqualFunc(before[i].Components, versions.Hosts[i].Components, func(a, b kubeversion.Instance) bool { return a.Version == b.Version && a.Image == b.Image }) {
			t.Errorf("host %s changed: %+v -> %+v", before[i].Host, before[i].Components, versions.Hosts[i].Components)
		}
	}
}
