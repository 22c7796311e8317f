package agent

// The host's kubelet (Options.KubeletConfig, `steward agent
// --kubelet-config FILE`): the agent runs it as its child with a
// kubeletrt.Runner and switches its version on request, so a Kubernetes
// upgrade (pkg/kubeupgrade's upgrading-kubelets step) moves each host's
// kubelet through the host's agent, as it rewrites the static pods'
// manifests through it (kubemanifests.go).

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/etcd-steward/steward/pkg/kubeletrt"
)

// ErrNoKubelet: the agent was not given a kubelet config, so it does not
// run its host's kubelet.
var ErrNoKubelet = errors.New("this agent does not run its host's kubelet")

// newKubeletRunner is the runner of an agent with a kubelet config (nil
// without): its state in DIR/agent/NAME/kubelet.json, its PID file in
// DIR/run, its default log DIR/logs/kubelet.log.
func newKubeletRunner(a *Agent) *kubeletrt.Runner {
	if a.opts.KubeletConfig == "" {
		return nil
	}
	state := filepath.Join(a.opts.Dir, "agent", "kubelet.json")
	pid := filepath.Join(a.runDir(), "kubelet.pid")
	if a.opts.Name != "local" {
		state = filepath.Join(a.opts.Dir, "agent", a.opts.Name, "kubelet.json")
		pid = filepath.Join(a.runDir(), "kubelet-"+a.opts.Name+".pid")
	}
	return &kubeletrt.Runner{ConfigPath: a.opts.KubeletConfig, StateFile: state, PIDFile: pid,
		DefaultLog: filepath.Join(a.opts.Dir, "logs", "kubelet.log"), Log: a.log}
}

// Kubelet is what runs of the host's kubelet.
func (a *Agent) Kubelet(ctx context.Context) (kubeletrt.Status, error) {
	if a.kubelet == nil {
		return kubeletrt.Status{}, notFound{ErrNoKubelet}
	}
	return a.kubelet.Kubelet(ctx)
}

// SwitchKubelet runs version's kubelet instead of the running one.
func (a *Agent) SwitchKubelet(ctx context.Context, version string) (kubeletrt.Status, error) {
	if a.kubelet == nil {
		return kubeletrt.Status{}, notFound{ErrNoKubelet}
	}
	st, err := a.kubelet.SwitchKubelet(ctx, version)
	if errors.Is(err, kubeletrt.ErrConfig) || errors.Is(err, kubeletrt.ErrNoBinary) {
		err = badRequest{err}
	}
	return st, a.advise(err)
}
