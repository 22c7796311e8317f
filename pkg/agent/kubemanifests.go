package agent

// The host's static pod manifests (Options.KubeManifests, `steward agent
// --kube-manifests DIR`): a Kubernetes upgrade (pkg/kubeupgrade) reads and
// rewrites the control plane's manifests through the agent of each host,
// as it reaches members through it.
//
// Invariants, enforced here:
//   - a manifest is written atomically (internal/atomicfile: a hidden
//     temporary file in the same directory, which the kubelet ignores,
//     renamed over it), 0600;
//   - before a plan's first write of a manifest, the manifest as it was is
//     copied into DIR/kube-manifests-kept/PLAN/NAME.yaml (atomically,
//     0600, the directories 0700 and synced into their parents) and kept
//     there, whatever the plan writes after, until the plan asks for its
//     removal once it is done
//     (DeleteKubeManifestsKept): the only way back to the manifest before
//     the plan is never deleted before the plan succeeded;
//   - names are a manifest's base name (lower-case letters, digits and
//     '-'), plan IDs letters, digits, '.', '_' and '-': nothing sent over
//     the API reaches a path outside the two directories.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/agentapi"
)

// ErrNoKubeManifests: the agent was not given its host's static pod
// manifests directory.
var ErrNoKubeManifests = errors.New("this agent was not given its host's static pod manifests directory")

// KeptManifestsDir is where an agent keeps the manifests a plan replaced,
// one directory per plan, under its Steward directory.
const KeptManifestsDir = "kube-manifests-kept"

var (
	manifestName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	keptPlanID   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

func checkManifestName(name string) error {
	if !manifestName.MatchString(name) {
		return badRequest{fmt.Errorf("manifest name %q: use the file's base name without .yaml (lower-case letters, digits and '-')", name)}
	}
	return nil
}

func checkKeptPlan(id string) error {
	if !keptPlanID.MatchString(id) || id == "." || id == ".." {
		return badRequest{fmt.Errorf("plan %q: a plan ID is letters, digits, '.', '_' and '-'", id)}
	}
	return nil
}

func (a *Agent) manifestPath(name string) (string, error) {
	if a.opts.KubeManifests == "" {
		return "", ErrNoKubeManifests
	}
	if err := checkManifestName(name); err != nil {
		return "", err
	}
	return filepath.Join(a.opts.KubeManifests, name+".yaml"), nil
}

// KubeManifest returns the manifest NAME.yaml.
func (a *Agent) KubeManifest(name string) (agentapi.KubeManifest, error) {
	path, err := a.manifestPath(name)
	if err != nil {
		return agentapi.KubeManifest{}, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return agentapi.KubeManifest{}, fmt.Errorf("no manifest %s on this host", path)
	}
	if err != nil {
		return agentapi.KubeManifest{}, err
	}
	return agentapi.KubeManifest{Name: name, Path: path, Content: b}, nil
}

// PutKubeManifest writes the manifest NAME.yaml for plan planID: nothing
// when it already holds content; else the manifest as it was before the
// plan kept (once per plan and name), then content written atomically.
func (a *Agent) PutKubeManifest(name, planID string, content []byte) (agentapi.KubeManifestWrite, error) {
	path, err := a.manifestPath(name)
	if err != nil {
		return agentapi.KubeManifestWrite{}, err
	}
	if err := checkKeptPlan(planID); err != nil {
		return agentapi.KubeManifestWrite{}, err
	}
	if len(content) == 0 {
		return agentapi.KubeManifestWrite{}, badRequest{fmt.Errorf("manifest %s: empty content", name)}
	}
	a.kubeMu.Lock()
	defer a.kubeMu.Unlock()
	out := agentapi.KubeManifestWrite{Name: name}
	cur, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(cur, content):
		return out, nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return out, err
	}
	if err == nil {
		dir := filepath.Join(a.opts.Dir, KeptManifestsDir, planID)
		kept := filepath.Join(dir, name+".yaml")
		if _, statErr := os.Stat(kept); errors.Is(statErr, os.ErrNotExist) {
			// Each directory made synced into its parent: the kept
			// copy must survive a crash as the manifest it keeps.
			if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
				return out, err
			}
			if err := atomicfile.WriteFile(kept, cur, 0o600); err != nil {
				return out, fmt.Errorf("keep %s before it is replaced: %w", path, err)
			}
		}
		out.Kept = kept
	}
	if err := atomicfile.WriteFile(path, content, 0o600); err != nil {
		return out, err
	}
	out.Changed = true
	a.log.Info("static pod manifest written", "manifest", path, "plan", planID, "kept", out.Kept)
	return out, nil
}

// ErrNoKeptManifest: nothing was kept of that manifest for that plan (the
// plan never wrote it, or its kept copies were removed).
var ErrNoKeptManifest = errors.New("no manifest kept")

// KubeManifestKept returns the manifest NAME.yaml as it was before plan
// planID first wrote it (what kube rollback brings back); notFound
// (404) when nothing of it was kept for the plan.
func (a *Agent) KubeManifestKept(planID, name string) (agentapi.KubeManifest, error) {
	if _, err := a.manifestPath(name); err != nil {
		return agentapi.KubeManifest{}, err
	}
	if err := checkKeptPlan(planID); err != nil {
		return agentapi.KubeManifest{}, err
	}
	a.kubeMu.Lock()
	defer a.kubeMu.Unlock()
	kept := filepath.Join(a.opts.Dir, KeptManifestsDir, planID, name+".yaml")
	b, err := os.ReadFile(kept)
	if errors.Is(err, os.ErrNotExist) {
		return agentapi.KubeManifest{}, notFound{fmt.Errorf("%w: %s was not kept for plan %s on this host", ErrNoKeptManifest, name, planID)}
	}
	if err != nil {
		return agentapi.KubeManifest{}, err
	}
	return agentapi.KubeManifest{Name: name, Path: kept, Content: b}, nil
}

// DeleteKubeManifestsKept removes what was kept for plan planID.
func (a *Agent) DeleteKubeManifestsKept(planID string) error {
	if err := checkKeptPlan(planID); err != nil {
		return err
	}
	a.kubeMu.Lock()
	defer a.kubeMu.Unlock()
	return os.RemoveAll(filepath.Join(a.opts.Dir, KeptManifestsDir, planID))
}
