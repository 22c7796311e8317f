package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/spf13/pflag"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	agentpkg "github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/memberlease"
)

// podFlags are the agent's flags for a member pod (DEP-01): the member
// lease it renews and the probes kubelet asks. Kept apart from the other
// flags (the pod's listen and advertise flags live beside them).
type podFlags struct {
	lease      string // NAMESPACE/NAME
	kubeconfig string
	probe      string // HOST:PORT
}

func (f *podFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.lease, "lease", "", "renew the member lease `NAMESPACE/NAME` (DEP-01: made by the operator) while this agent's member of that name (or its only member) is started, voting and healthy")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig `FILE` of the API server holding the lease (default: the pod's service account)")
	fs.StringVar(&f.probe, "probe-address", "", "serve /livez and /readyz over plain HTTP on `HOST:PORT` (a pod's liveness and readiness probes)")
}

// usePod takes the lease of the pod the agent runs in (POD_NAMESPACE/
// POD_NAME from getenv, memberlease.RefFromEnv) when --lease is not given:
// for a pod mode flag to call before check.
func (f *podFlags) usePod(getenv func(string) string) error {
	if f.lease != "" {
		return nil
	}
	r, err := memberlease.RefFromEnv(getenv)
	if err != nil {
		return err
	}
	f.lease = r.String()
	return nil
}

// check refuses bad flags before anything starts.
func (f *podFlags) check() error {
	if f.lease != "" {
		if _, err := memberlease.ParseRef(f.lease); err != nil {
			return cli.Advise(err, memberlease.ErrBadRef, ": give --lease NAMESPACE/NAME, e.g. --lease default/etcd-0")
		}
	} else if f.kubeconfig != "" {
		return errors.New("--kubeconfig is the API server of --lease: give --lease NAMESPACE/NAME too")
	}
	return nil
}

// start serves the probes and starts renewing the lease, as the flags ask;
// stop ends both and waits for them.
func (f *podFlags) start(ctx context.Context, a *agentpkg.Agent, log *slog.Logger) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if f.probe != "" {
		s, err := a.ServeProbes(ctx, f.probe)
		if err != nil {
			return nil, fmt.Errorf("--probe-address %s: %w; give a free HOST:PORT", f.probe, err)
		}
		stops = append(stops, s)
	}
	if f.lease != "" {
		ref, err := memberlease.ParseRef(f.lease)
		if err != nil {
			stop()
			return nil, err
		}
		kc, err := memberlease.NewClient(f.kubeconfig)
		if err != nil {
			stop()
			return nil, fmt.Errorf("--lease %s: %w; run the agent in its member pod, or give --kubeconfig FILE", f.lease, err)
		}
		r := &memberlease.Renewer{Leases: kc.CoordinationV1(), Lease: ref, Health: a.LeaseHealth(ref.Name), Log: log.With("component", "lease")}
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { r.Run(lctx) })
		stops = append(stops, func() { cancel(); wg.Wait() })
	}
	return stop, nil
}
