package kubeupgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-semver/semver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// ErrNoManifestsDir: a host's Steward agent does not know the host's
// static pod manifests directory (the command adds how to give it one).
var ErrNoManifestsDir = errors.New("agent without a static pod manifests directory")

// capKubeManifests is agentapi.CapKubeManifests (operations do not import
// the agent's client package: they use the handle's clients).
const capKubeManifests = "kube-manifests"

// admission admits a kube-upgrade plan when no plan has work left.
var admission = plan.Admission{}

// ApplyOptions are apply's inputs beyond the cluster.
type ApplyOptions struct {
	PlanOptions
	// Kubeconfig is the kubeconfig's path (recorded: resume uses it).
	Kubeconfig string
}

// Apply runs the dry run, refuses what it refuses (nothing recorded),
// checks that every host's agent can write its manifests, records the
// plan and runs it. It returns the dry run and the plan (nil when
// refused before it was recorded).
func Apply(ctx context.Context, c *cluster.Cluster, cfg *rest.Config, o ApplyOptions) (*kubeversion.Plan, *plan.Plan, error) {
	if _, _, err := kubeversion.TargetOf(o.Target); err != nil {
		return nil, nil, err
	}
	if _, err := plan.Admit(c.Plans(), admission); err != nil {
		return nil, nil, err
	}
	dry, err := Plan(ctx, c, cfg, o.PlanOptions)
	if err != nil {
		return nil, nil, err
	}
	if err := dry.Refusal(); err != nil {
		return dry, nil, err
	}
	p, err := NewPlan(dry, time.Now())
	if err != nil {
		return dry, nil, err
	}
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return dry, nil, err
	}
	if err := checkAgents(ctx, c, pl.Components); err != nil {
		return dry, nil, err
	}
	if pl.StorageHashes, err = storageHashes(cfg); err != nil {
		return dry, nil, fmt.Errorf("discovery's storage versions: %w", err)
	}
	pl.Kubeconfig = o.Kubeconfig
	if err := plan.SetPayload(p, pl); err != nil {
		return dry, nil, err
	}
	if err := c.Plans().Save(ctx, p); err != nil {
		return dry, nil, err
	}
	return dry, p, Resume(ctx, c, p.ID)
}

// agentOf is the spec's agent of a Kubernetes node: the agent of that
// name, else the one on the host of that name.
func agentOf(s *spec.Cluster, host string) (string, bool) {
	if a, ok := s.Agent(host); ok {
		return a.Name, true
	}
	for _, a := range s.Agents {
		if a.Host == host {
			return a.Name, true
		}
	}
	return "", false
}

// ErrManifest: a host's static pod manifest of a planned component
// cannot be read or rewritten (the upgrade would stop at that host's step
// after others were upgraded).
var ErrManifest = errors.New("a planned static pod manifest cannot be rewritten")

// checkAgents refuses hosts whose agent is not in the spec, does not
// answer, or knows no manifests directory; then reads every planned
// component's manifest through its host's agent and rewrites it in
// memory (Rewrite), refusing the first that cannot be, so a bad host is
// found before any other is upgraded.
func checkAgents(ctx context.Context, c *cluster.Cluster, comps []PlannedComponent) error {
	var hosts []string
	for _, pc := range comps {
		if !slices.Contains(hosts, pc.Host) {
			hosts = append(hosts, pc.Host)
		}
	}
	for _, h := range hosts {
		name, ok := agentOf(c.Spec, h)
		if !ok {
			return refusal.New(ErrNoManifestsDir, "host %s: no Steward agent of that name or host in the cluster spec: the upgrade writes each host's manifests through its agent", h)
		}
		ac, err := c.Agent(name)
		if err != nil {
			return err
		}
		info, err := ac.Info(ctx)
		if err != nil {
			return fmt.Errorf("host %s: %w", h, err)
		}
		if !slices.Contains(info.Capabilities, capKubeManifests) {
			return refusal.New(ErrNoManifestsDir, "host %s: its Steward agent %s does not know the host's static pod manifests directory, through which the upgrade rewrites the control plane's manifests", h, name)
		}
		for _, pc := range comps {
			if pc.Host != h || pc.Component == kubeversion.Kubelet {
				continue
			}
			m, err := ac.KubeManifest(ctx, pc.Component)
			if err != nil {
				return refusal.New(ErrManifest, "host %s: read its %s manifest through agent %s: %v: make the manifest readable there, then apply again", h, pc.Component, name, err)
			}
			if _, err := Rewrite(m.Content, pc); err != nil {
				return refusal.New(ErrManifest, "host %s: %s (%s): %v: fix that manifest, then apply again", h, m.Path, pc.Component, err)
			}
		}
	}
	return nil
}

// Resume runs (or resumes) kube-upgrade plan id from its first step not
// done; each step decides from what the hosts run.
func Resume(ctx context.Context, c *cluster.Cluster, id string) error {
	p, err := c.Plans().Get(id)
	if err != nil {
		return err
	}
	pl, err := plan.PayloadOf[Payload](p)
	if err != nil {
		return err
	}
	if pl.Kubeconfig == "" {
		return fmt.Errorf("kube-upgrade plan %s records no kubeconfig", id)
	}
	cfg, err := RESTConfig(pl.Kubeconfig)
	if err != nil {
		return err
	}
	env, err := NewEnv(c, cfg, pl.Kubeconfig)
	if err != nil {
		return err
	}
	return plan.Run(ctx, c.Plans(), id, &Executor{Env: env, Progress: c.Progress}, c.Progress)
}

// leaders are the nodes named by the controller-manager's and the
// scheduler's leader leases (holderIdentity HOSTNAME_UUID), when a node
// has that name.
func leaders(ctx context.Context, cs kubernetes.Interface, nodes []string) []string {
	var out []string
	for _, l := range []string{kubeversion.ControllerManager, kubeversion.Scheduler} {
		lease, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, l, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			continue
		}
		host, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		if slices.Contains(nodes, host) && !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out
}

// storageHashes are discovery's storage version hashes of the resources
// the API server stores itself.
func storageHashes(cfg *rest.Config) (map[string]string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return hashesOf(dc.ServerPreferredResources())
}

// ErrPartialDiscovery: discovery failed for some API groups, so their
// resources' storage version hashes are unknown and they would never be
// migrated.
var ErrPartialDiscovery = errors.New("discovery failed for some API groups")

// hashesOf are the storage version hashes of discovery's lists; any
// error, a partial one too (an aggregated API not answering), fails: a
// resource whose hash is missing would never be migrated.
func hashesOf(lists []*metav1.APIResourceList, err error) (map[string]string, error) {
	if discovery.IsGroupDiscoveryFailedError(err) {
		return nil, refusal.New(ErrPartialDiscovery, "%v: their resources' storage versions are unknown and would not be migrated; make every API group's discovery answer (an APIService whose backend is down: fix or remove it), then try again", err)
	}
	if err != nil {
		return nil, err
	}
	sel, _ := kmigrate.SelectAll(kmigrate.ResourcesFrom(lists))
	out := map[string]string{}
	for _, r := range sel {
		out[r.Name()] = r.StorageVersionHash
	}
	return out, nil
}

// env is the real Env: client-go for what runs, each API server at its
// own address, each host's agent for its manifests, the etcd upgrade,
// the storage migration.
type env struct {
	c          *cluster.Cluster
	cfg        *rest.Config
	kubeconfig string
	cs         kubernetes.Interface
}

// NewEnv returns the Env of a cluster and the Kubernetes above it.
func NewEnv(c *cluster.Cluster, cfg *rest.Config, kubeconfig string) (Env, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &env{c: c, cfg: cfg, kubeconfig: kubeconfig, cs: cs}, nil
}

func (e *env) Running(ctx context.Context) (*Running, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return Observe(ctx, e.cs)
}

// maxAPIServerBody bounds what is read of an API server's /version or
// /readyz (each a few hundred bytes).
const maxAPIServerBody = 64 << 10

func (e *env) APIServer(ctx context.Context, a APIServer) (string, bool, error) {
	c := rest.CopyConfig(e.cfg)
	c.Host = a.URL
	rt, err := rest.TransportFor(c)
	if err != nil {
		return "", false, err
	}
	hc := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	get := func(path string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIServerBody))
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", path, err)
		}
		return resp.StatusCode, b, nil
	}
	code, body, err := get("/version")
	if err != nil {
		return "", false, err
	}
	if code != http.StatusOK {
		return "", false, fmt.Errorf("/version: HTTP %d", code)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", false, fmt.Errorf("/version: %w", err)
	}
	code, _, err = get("/readyz")
	if err != nil {
		return v.GitVersion, false, err
	}
	return v.GitVersion, code == http.StatusOK, nil
}

func (e *env) agentName(host string) (string, error) {
	name, ok := agentOf(e.c.Spec, host)
	if !ok {
		return "", refusal.New(ErrNoManifestsDir, "host %s: no Steward agent of that name or host in the cluster spec", host)
	}
	return name, nil
}

func (e *env) Manifest(ctx context.Context, host, component string) ([]byte, error) {
	name, err := e.agentName(host)
	if err != nil {
		return nil, err
	}
	ac, err := e.c.Agent(name)
	if err != nil {
		return nil, err
	}
	m, err := ac.KubeManifest(ctx, component)
	return m.Content, err
}

func (e *env) WriteManifest(ctx context.Context, host, component, id string, content []byte) error {
	name, err := e.agentName(host)
	if err != nil {
		return err
	}
	ac, err := e.c.Agent(name)
	if err != nil {
		return err
	}
	_, err = ac.PutKubeManifest(ctx, component, id, content)
	return err
}

func (e *env) Kept(ctx context.Context, host, component, id string) ([]byte, bool, error) {
	name, err := e.agentName(host)
	if err != nil {
		return nil, false, err
	}
	ac, err := e.c.Agent(name)
	if err != nil {
		return nil, false, err
	}
	m, ok, err := ac.KubeManifestKept(ctx, id, component)
	return m.Content, ok, err
}

func (e *env) EtcdHealth(ctx context.Context) error {
	st, err := status.Get(ctx, e.c)
	if err != nil {
		return err
	}
	var bad []string
	for _, ck := range []kubeversion.Check{etcdHealth(st), alarms(st)} {
		if ck.Result != kubeversion.Pass {
			bad = append(bad, ck.Message)
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func (e *env) PruneKept(ctx context.Context, host, id string) error {
	name, err := e.agentName(host)
	if err != nil {
		return err
	}
	ac, err := e.c.Agent(name)
	if err != nil {
		return err
	}
	return ac.DeleteKubeManifestsKept(ctx, id)
}

// UpgradeEtcd runs the steps of an etcd upgrade plan to version inside
// this plan's step, by the etcd upgrade's own (idempotent) executor:
// nothing when every member runs version or newer. The etcd plan is
// computed once and kept, with the steps done, in
// DIR/kube-upgrade-etcd-ID.json (atomically, 0600) until its last step
// is done, so a resume after a kill runs the same steps from the first
// not done (a new plan would be refused: the members run mixed
// versions).
func (e *env) UpgradeEtcd(ctx context.Context, id, version string) error {
	file := filepath.Join(e.c.Dir, "kube-upgrade-etcd-"+id+".json")
	var p *plan.Plan
	if b, err := os.ReadFile(file); err == nil {
		p = &plan.Plan{}
		if err := json.Unmarshal(b, p); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if p == nil {
		st, err := status.Get(ctx, e.c)
		if err != nil {
			return err
		}
		older := false
		for _, m := range st.Members {
			if m.Version == "" || versionLess(m.Version, version) {
				older = true
			}
		}
		if !older {
			e.c.Progress.Say("etcd runs %s or newer on every member", version)
			return nil
		}
		if p, err = upgrade.NewPlan(ctx, e.c, upgrade.Options{To: version}); err != nil {
			return fmt.Errorf("plan the etcd upgrade to %s: %w", version, err)
		}
	}
	save := func() error {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return atomicfile.WriteFile(file, b, 0o600)
	}
	if err := save(); err != nil {
		return err
	}
	ex := &upgrade.Executor{C: e.c, Progress: e.c.Progress}
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.State == plan.Done {
			continue
		}
		e.c.Progress.Say("etcd upgrade step %d/%d: %s", s.Number(), len(p.Steps), s.Description)
		if err := ex.Execute(ctx, p, s); err != nil {
			return fmt.Errorf("etcd upgrade to %s, step %d (%s): %w", version, s.Number(), s.Description, err)
		}
		s.State = plan.Done
		if err := save(); err != nil {
			return err
		}
	}
	return os.Remove(file)
}

func versionLess(a, b string) bool {
	va, err1 := semver.NewVersion(strings.TrimPrefix(a, "v"))
	vb, err2 := semver.NewVersion(strings.TrimPrefix(b, "v"))
	if err1 != nil || err2 != nil {
		return a != b
	}
	return va.LessThan(*vb)
}

func (e *env) StorageHashes(context.Context) (map[string]string, error) { return storageHashes(e.cfg) }

func (e *env) MigrateStorage(ctx context.Context, resources []string) error {
	_, err := kmigrate.Run(ctx, kmigrate.Options{Config: e.cfg, Kubeconfig: e.kubeconfig, Resources: resources, Dir: e.c.Dir})
	return err
}
