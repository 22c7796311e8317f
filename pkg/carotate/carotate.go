// Package carotate replaces the cluster CA in phases, as a persisted,
// resumable plan (package plan) that `steward plan resume` and `steward
// plan abort` handle like an upgrade's:
//
//  1. prepare: a new CA (pki/ca-next.*) and its certificate cross-signed
//     by the old CA (pki/ca-cross.crt);
//  2. trust: pki/ca.crt, the file members, the agent and `steward env`
//     read, becomes the bundle old + new, replaced in place;
//  3. reissue: the server, peer and agent leaves are reissued by the new
//     CA with their keys, each served with the cross-signed CA after it,
//     so whoever trusts the old CA only still verifies them;
//  4. clients: the admin client certificate and the issued client
//     certificates (pki/clients/) likewise;
//  5. drop: the new CA becomes pki/ca.* (the old one kept as pki/ca-old.*)
//     and ca.crt holds it alone;
//  6. one restart per member, leadership moved away first, each waiting
//     until the member is healthy and caught up: etcd reads its trusted CA
//     files only when it starts, so until it restarts it still accepts
//     what the old CA signed;
//  7. retire: once every member trusts the new CA alone, every leaf is
//     served without the cross-signed CA (each file rewritten as the leaf
//     alone, as on a fresh cluster; same certificate, same key), so a
//     client trusting only the old CA stops verifying the members and the
//     agents. A plan an older Steward wrote without this step gets it
//     appended when it is resumed (amend).
//
// On a cluster with joined hosts each file step does the same for every
// host through its agent's API after this machine's directory: step 2 and
// step 5 push ca.crt to each host (PUT /v1/ca), step 3 reissues each
// host's server, peer, agent and client certificates from the new CA
// (their keys stay on the host; GET and PUT /v1/certs/NAME) and waits
// until they are served; step 6 restarts each member through its own
// host's agent; step 7 installs each host's leaves again without the
// cross-signed CA (PUT /v1/certs/NAME) and waits until they are served. A host that cannot be reached or refuses fails the step
// with an error naming it (the other hosts still done), and the plan
// stays resumable.
//
// Every step is idempotent: re-run after a crash, it finds its work done
// or finishes it.
//
// A rotation stopped (aborted, failed or interrupted) before its drop step
// is rolled back by a plan of its own (Rollback, kind ca-rotation-rollback,
// `steward rollback`): every leaf issued by the old CA again, ca.crt the old
// CA alone, the new CA moved aside, without a member restart. Once the drop
// step began it is refused (ErrOldCADropped).
package carotate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// Step kinds of a CA rotation plan.
const (
	StepPrepare = "ca-prepare"
	StepTrust   = "ca-trust-both"
	StepReissue = "ca-reissue-leaves"
	StepClients = "ca-move-clients"
	StepDrop    = "ca-drop-old"
	StepRestart = "ca-restart-member"
	// StepRetire is the last step: the leaves served without the new CA
	// cross-signed by the old one (a plan written before it existed gets
	// it when resumed: amend).
	StepRetire   = "ca-retire-cross"
	defaultWait  = 2 * time.Minute
	pollInterval = 500 * time.Millisecond
)

// ErrTLSDisabled: the cluster runs without TLS; there is no CA to rotate.
var ErrTLSDisabled = errors.New("the cluster runs without TLS: there is no CA to rotate")

// NewPlan builds a CA rotation plan for the cluster (not saved). leader
// is the member leading now ("" when unknown): its restart comes last, so
// that the rotation moves leadership once (see restartOrder).
func NewPlan(c *cluster.Cluster, leader string, now time.Time) (*plan.Plan, error) {
	if c.Spec.TLS.Disabled {
		return nil, ErrTLSDisabled
	}
	p := &plan.Plan{ID: plan.NewID(plan.KindCARotation, now), Kind: plan.KindCARotation,
		State: plan.Pending, CreatedAt: now.UTC()}
	if err := plan.SetPayload(p, Payload{OldCA: currentCA(c)}); err != nil {
		return nil, err
	}
	add := func(kind, member, desc string) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: kind, Member: member, Description: desc, State: plan.Pending})
	}
	add(StepPrepare, "", "create the new CA and its certificate cross-signed by the old one")
	onHosts, hostClients := "", ""
	if hs := hostset.Remote(c.Spec).Names(); len(hs) > 0 {
		onHosts = " here and on the hosts " + strings.Join(hs, ", ")
		hostClients = " (on the hosts their client certificates too)"
	}
	add(StepTrust, "", "trust the old and the new CA (ca.crt becomes the bundle of both"+onHosts+")")
	add(StepReissue, "", "reissue the server, peer and agent certificates from the new CA"+onHosts+hostClients)
	add(StepClients, "", "reissue the admin and the issued client certificates from the new CA")
	add(StepDrop, "", "make the new CA the CA and drop the old one from ca.crt"+onHosts+" (kept as ca-old.* here)")
	for _, name := range restartOrder(c, leader) {
		add(StepRestart, name, "restart "+name+" so that it trusts the new CA alone")
	}
	add(StepRetire, "", retireDescription(c))
	return p, nil
}

// retireDescription describes the StepRetire step.
func retireDescription(c *cluster.Cluster) string {
	onHosts := ""
	if hs := hostset.Remote(c.Spec).Names(); len(hs) > 0 {
		onHosts = " here and on the hosts " + strings.Join(hs, ", ")
	}
	return "serve every certificate without the new CA cross-signed by the old one" + onHosts + ": the old CA verifies them no more"
}

// amend brings a CA rotation plan written before StepRetire existed up to
// date when it is resumed: the step is appended, pending, after the
// restarts (their order, indexes and states untouched), so that the
// resumed rotation ends as a new one does. A plan that has the step is
// left alone.
func amend(c *cluster.Cluster) func(*plan.Plan) bool {
	return func(p *plan.Plan) bool {
		if p.Kind != plan.KindCARotation {
			return false
		}
		for _, s := range p.Steps {
			if s.Kind == StepRetire {
				return false
			}
		}
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepRetire, Description: retireDescription(c), State: plan.Pending})
		return true
	}
}

// restartOrder is the order of the member restarts: the followers first,
// the leader last. Each leadership transfer drops the proposals that reach
// the leader while it runs, and raft drops those a follower forwarded
// without a word, so that their clients wait for their own timeout
// (docs/upgrades.md): restarting the leader last, after handing leadership
// to a member already restarted (rolling.Transferee over pendingRestarts),
// makes one transfer in all.
func restartOrder(c *cluster.Cluster, leader string) []string {
	var names []string
	for _, m := range c.Spec.Members {
		names = append(names, m.Name)
	}
	return rolling.Order(names, leader)
}

// Apply plans a CA rotation, saves the plan and runs it. It refuses while
// another plan is active.
func Apply(ctx context.Context, c *cluster.Cluster) (*plan.Plan, error) {
	store := c.Plans()
	if _, err := plan.Admit(store, admitRotation); err != nil {
		return nil, err
	}
	leader := ""
	if st, err := status.Get(ctx, c); err == nil {
		leader = st.Cluster.Leader
	}
	p, err := NewPlan(c, leader, time.Now())
	if err != nil {
		return nil, err
	}
	if err := store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, Run(ctx, c, p.ID)
}

// Run runs the CA rotation plan id from its first step that is not done;
// a plan an older Steward wrote gets the steps it lacks first (amend).
func Run(ctx context.Context, c *cluster.Cluster, id string) error {
	return plan.RunAmended(ctx, c.Plans(), id, &Executor{C: c, Progress: c.Progress}, amend(c), c.Progress)
}

// Executor runs the steps of a CA rotation plan.
type Executor struct {
	C *cluster.Cluster
	// Progress receives a line per notable action (may be nil).
	Progress progress.Func
	// HealthTimeout bounds the wait for a restarted member (default 2
	// minutes, or the plan's HealthTimeoutSeconds).
	HealthTimeout time.Duration
}

// Execute implements plan.Executor.
func (e *Executor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	c, wait, err := e.C.ForStep(p, e.HealthTimeout)
	if err != nil {
		return err
	}
	e.C, e.HealthTimeout = c, wait
	dir := c.CertDir()
	if s.Kind != StepRestart {
		// The file steps hold the lock renewals hold: a renewal that began
		// before the rotation (signing with the old CA) must not write over
		// a leaf a step reissued.
		lock, err := certs.Lock(ctx, c, 2*time.Minute)
		if err != nil {
			return fmt.Errorf("CA rotation: %w", err)
		}
		defer lock.Release()
	}
	switch s.Kind {
	case StepPrepare:
		return certs.RotationPrepare(dir, c.Spec.Name, c.Validity())
	case StepTrust:
		if err := certs.RotationTrustBoth(dir); err != nil {
			return err
		}
		return certs.PushTrustBundle(ctx, c)
	case StepReissue:
		if err := e.reissue(dir, serverLeaves); err != nil {
			return err
		}
		rs, err := certs.RotateHostLeaves(ctx, c, e.wait())
		for _, r := range rs {
			e.Progress.Say("  host %s: %s reissued by the new CA (serial %s)", r.Host, r.Name, r.NewSerial)
		}
		return err
	case StepClients:
		names, err := pki.Names(dir)
		if err != nil {
			return err
		}
		return e.reissue(dir, clientLeaves(names))
	case StepDrop:
		if err := certs.RotationDrop(dir); err != nil {
			return err
		}
		return certs.PushTrustBundle(ctx, c)
	case StepRestart:
		return e.restart(ctx, s.Member, pendingRestarts(p, s.Index))
	case StepRetire:
		return e.retire(ctx, dir)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// pendingRestarts is the members of the restart steps after step index
// that are not done, in order: rolling.Transferee ranks a member restarted
// already above them (it needs no transfer again), and a later one above a
// sooner one, so that the leadership given away is not taken back before
// the plan ends. The order leader last (restartOrder) then makes one
// transfer in all; a leader that changed since the plan was made costs at
// most one more.
func pendingRestarts(p *plan.Plan, index int) []string {
	var out []string
	for _, s := range p.Steps {
		if s.Kind == StepRestart && s.Index > index && s.State != plan.Done {
			out = append(out, s.Member)
		}
	}
	return out
}

// wait is the bound of a health gate or of the wait for a host's leaves
// served.
func (e *Executor) wait() time.Duration {
	if e.HealthTimeout > 0 {
		return e.HealthTimeout
	}
	return defaultWait
}

// reissue reissues the named leaves that exist in dir.
func (e *Executor) reissue(dir string, want []string) error {
	have, err := pki.Names(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, n := range want {
		for _, h := range have {
			if h == n {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	rs, err := certs.RotationReissue(dir, e.C.Validity(), names, time.Now())
	for _, r := range rs {
		e.Progress.Say("  %s reissued by the new CA (serial %s)", r.Name, r.NewSerial)
	}
	return err
}

// retire serves every leaf without the cross-signed CA: this machine's
// files rewritten as the leaf alone, then each joined host's through its
// agent (waited for until served), then a live handshake with every
// member's client and peer port and every host's agent until the old CA
// alone verifies none of them. Each part finds its work done on a re-run.
func (e *Executor) retire(ctx context.Context, dir string) error {
	names, err := certs.RotationRetireCross(dir)
	for _, n := range names {
		e.Progress.Say("  %s served without the cross-signed CA", n)
	}
	if err != nil {
		return err
	}
	rs, err := certs.RetireHostCross(ctx, e.C, e.wait())
	for _, r := range rs {
		e.Progress.Say("  host %s: %s served without the cross-signed CA", r.Host, r.Name)
	}
	if err != nil {
		return err
	}
	old := filepath.Join(dir, pki.CAOldCert)
	if _, err := os.Stat(old); err != nil {
		return nil // no old CA kept to check against (not a rotation's drop)
	}
	return certs.WaitOldCARetired(ctx, e.C, old, e.wait())
}

// restart restarts one member through its agent, leadership moved away
// first (rolling: to a member not in pending, the restarts still to come),
// and waits until the new process is healthy and has applied what the
// leader had when it came back.
func (e *Executor) restart(ctx context.Context, name string, pending []string) error {
	c := e.C
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	pid := 0
	turn := rolling.Action{
		Act: func(ctx context.Context, _ *status.Status, name string) error {
			ac, err := c.RuntimeFor(m)
			if err != nil {
				return err
			}
			ms, err := ac.Restart(ctx, name)
			if err != nil {
				return fmt.Errorf("restart member %s: %w", name, err)
			}
			pid = ms.PID
			return nil
		},
		CaughtUp: func(ctx context.Context, name string) error {
			wait := e.wait()
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := status.WaitCaughtUp(wctx, c, name, pid, pollInterval); err != nil {
				return fmt.Errorf("health gate after restarting %s: waited %s: %w", name, wait, err)
			}
			e.Progress.Say("  %s restarted and healthy", name)
			return nil
		},
		Progress: e.Progress,
	}
	return turn.Member(ctx, rolling.Of(c), nil, name, pending)
}

// serverLeaves are the leaves a rotation reissues in its leaves step (and
// its rollback issues by the old CA again): the ones members and the agent
// serve with. The others, the client certificates, have a step of their
// own.
var serverLeaves = []string{"server", "peer", "agent"}

// clientLeaves are the names, of the leaves named, that are not
// serverLeaves.
func clientLeaves(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(serverLeaves, n) {
			out = append(out, n)
		}
	}
	return out
}
