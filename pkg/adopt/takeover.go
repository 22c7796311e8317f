package adopt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// Step kinds of a certificate take-over plan (kind certs-take-over).
const (
	// StepTakeOverSwitch restarts one member with Steward's certificate
	// files (one step per member).
	StepTakeOverSwitch = "certs-take-over-switch"
	// StepTakeOverRecord drops the operator's certificate files from the
	// spec: from then on the cluster's certificates are Steward's.
	StepTakeOverRecord = "certs-take-over-record"
)

// Refusals of a certificate take-over (each a *refusal.Refusal; the
// command says what to do about ErrTakenOver, ErrNotAllAdopted and
// ErrCAExpiresSoon).
var (
	// ErrNotAllAdopted: a member is still run by someone else.
	ErrNotAllAdopted = errors.New("not every member is adopted")
	// ErrOwnCerts: Steward issues the cluster's certificates already.
	ErrOwnCerts = errors.New("Steward issues the cluster's certificates already")
	// ErrCA: the CA certificate and key given cannot be taken over: they
	// do not load, the key is not the certificate's, it is no CA, or an
	// ECDSA key it is not.
	ErrCA = errors.New("the CA given cannot be taken over")
	// ErrCANotIssuer: a certificate the cluster runs with (a member's
	// serving or peer certificate, the client certificate recorded at
	// attach) was not signed by the CA given, or the members trust
	// another CA besides it.
	ErrCANotIssuer = errors.New("the CA given did not sign the cluster's certificates")
	// ErrCAValidity: the CA expires before a leaf Steward would issue
	// from it would (or is not valid yet).
	ErrCAValidity = errors.New("the CA is not valid for long enough")
	// ErrCAExpiresSoon is the ErrCAValidity (of the same text) of a CA
	// that expires within a leaf's lifetime: renewing it is the way on.
	ErrCAExpiresSoon = fmt.Errorf("%w", ErrCAValidity)
	// ErrTakenOver is the ErrOwnCerts (of the same text) of a cluster
	// whose certificates Steward took over already.
	ErrTakenOver = fmt.Errorf("%w", ErrOwnCerts)
	// ErrPeerNames: the members' peer certificates have different common
	// names and a member's peer port lets in only one name.
	ErrPeerNames = errors.New("the members' peer certificates have different common names")
)

// TakeOverOptions are the operator's CA files a take-over imports.
type TakeOverOptions struct {
	CACert, CAKey string
}

// TakeOverCheck checks, changing nothing, that Steward can take over
// issuing the certificates of c with the CA of o, and returns the CA and
// the leaves it would issue: every member adopted and healthy, the key
// the certificate's, the CA valid for a leaf's lifetime at least, and
// every member's serving and peer certificate files and the operator's
// client certificate signed by it, the members' trusted CA files holding
// it alone, and their peer certificates of one common name when a member
// restricts its peer port to one (--peer-cert-allowed-cn).
func TakeOverCheck(ctx context.Context, c *cluster.Cluster, o TakeOverOptions, now time.Time) (*pki.CA, certs.TakeOverLeaves, error) {
	var none certs.TakeOverLeaves
	s := c.Spec
	switch {
	case !s.IsExternal():
		return nil, none, refusal.New(ErrNotAttached, "cluster %s is not attached: Steward issues its certificates already", s.Name)
	case s.TLS.Disabled:
		return nil, none, refusal.New(ErrOwnCerts, "cluster %s runs without TLS: there are no certificates to take over", s.Name)
	case !s.OperatorCerts():
		return nil, none, refusal.New(ErrTakenOver, "Steward took over issuing the certificates of cluster %s already", s.Name)
	case !s.AllAdopted():
		var not []string
		for _, m := range s.Members {
			if !m.IsAdopted() {
				not = append(not, m.Name)
			}
		}
		return nil, none, refusal.New(ErrNotAllAdopted, "cluster %s still has members Steward does not run (%s)", s.Name, strings.Join(not, ", "))
	}
	for _, m := range s.Members {
		if a, ok := s.Agent(m.Agent); ok && a.Remote() {
			return nil, none, refusal.New(cluster.ErrNotAcrossHosts, "member %s runs on host %s: a certificate take-over is built for members of this machine's agent only", m.Name, a.Host)
		}
		if m.Adopted.TLS == nil {
			return nil, none, refusal.New(ErrOwnCerts, "member %s runs without certificates: there are none to take over", m.Name)
		}
	}
	ca, err := pki.LoadCA(o.CACert, o.CAKey)
	if err != nil {
		return nil, none, refusal.New(ErrCA, "%v", err)
	}
	v := c.Validity().WithDefaults()
	switch {
	case now.Before(ca.Cert.NotBefore):
		return nil, none, refusal.New(ErrCAValidity, "the CA %s (%s) is not valid before %s", o.CACert, ca.Cert.Subject.CommonName, ca.Cert.NotBefore.UTC().Format(time.RFC3339))
	case ca.Cert.NotAfter.Sub(now) < v.Leaf:
		return nil, none, refusal.New(ErrCAExpiresSoon, "the CA %s (%s) expires %s, within the lifetime of a leaf Steward issues (%s, tls.leafValidity)", o.CACert, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), v.Leaf)
	}
	// What the cluster runs with now: every file checked, all failures named.
	var bad []string
	_, clientCert, _ := c.Spec.ClientFiles(c.Dir)
	if err := ca.Signed(clientCert); err != nil {
		bad = append(bad, "the operator's client certificate "+err.Error())
	}
	peerCNs := map[string][]string{}
	l := certs.TakeOverLeaves{Server: certs.Leaf{CN: s.Name + "-server"}}
	for _, m := range s.Members {
		t := m.Adopted.TLS
		for _, f := range []struct{ what, file string }{{"serving", t.ServerCert}, {"peer", t.PeerCert}} {
			if err := ca.Signed(f.file); err != nil {
				bad = append(bad, fmt.Sprintf("member %s's %s certificate %v", m.Name, f.what, err))
			}
		}
		switch holds, others, err := ca.Trusts(t.CA); {
		case err != nil:
			bad = append(bad, fmt.Sprintf("member %s's trusted CA file: %v", m.Name, err))
		case !holds:
			bad = append(bad, fmt.Sprintf("member %s trusts %s, which does not hold this CA", m.Name, t.CA))
		case others > 0:
			bad = append(bad, fmt.Sprintf("member %s trusts %s, which holds %d other CA certificates besides this CA: after the take-over the members trust this CA alone, so clients of the others would be refused; remove them from the bundle first", m.Name, t.CA, others))
		}
		_, sh, err := pki.CertNames(t.ServerCert)
		if err == nil {
			l.Server.Hosts = append(l.Server.Hosts, sh...)
		}
		pcn, ph, err := pki.CertNames(t.PeerCert)
		if err == nil {
			peerCNs[pcn] = append(peerCNs[pcn], m.Name)
			l.Peer.Hosts = append(l.Peer.Hosts, ph...)
		}
		// The hosts Steward's own certificates name (Cluster.EnsureCerts).
		for _, u := range []string{m.ClientURL, m.PeerURL} {
			if hp, err := spec.HostPort(u); err == nil {
				h, _, _ := net.SplitHostPort(hp)
				l.Server.Hosts, l.Peer.Hosts = append(l.Server.Hosts, h), append(l.Peer.Hosts, h)
			}
		}
	}
	if len(bad) > 0 {
		return nil, none, refusal.New(ErrCANotIssuer, "cannot take over the certificates of cluster %s with the CA %s (%s): %s; nothing was changed", s.Name, o.CACert, ca.Cert.Subject.CommonName, strings.Join(bad, "; "))
	}
	// One peer certificate replaces the members', member by member: a
	// member not switched yet must let it in. A member restricting its
	// peer port to one name (--peer-cert-allowed-cn) lets in only that
	// name, so Steward's certificate keeps it; members that restrict
	// nothing (kubeadm's: a peer certificate per member, named after it)
	// let in any certificate of the CA, and Steward's gets its own
	// cluster-wide name (CLUSTER-peer), which the peer ports then require.
	var restrict []string
	for _, m := range s.Members {
		if cn := m.Adopted.TLS.PeerAllowedCN; cn != "" {
			restrict = append(restrict, fmt.Sprintf("%s lets in only %q", m.Name, cn))
		}
	}
	switch {
	case len(restrict) == 0:
		l.Peer.CN = s.Name + "-peer"
	case len(peerCNs) == 1:
		for cn := range peerCNs {
			l.Peer.CN = cn
		}
	default:
		var parts []string
		for cn, ms := range peerCNs {
			parts = append(parts, fmt.Sprintf("%q (%s)", cn, strings.Join(ms, ", ")))
		}
		slices.Sort(parts)
		return nil, none, refusal.New(ErrPeerNames, "the peer certificates of cluster %s have different common names: %s, and %s (--peer-cert-allowed-cn), so no one peer certificate of Steward's can replace them member by member; drop --peer-cert-allowed-cn from the members first, or give them one peer name", s.Name, strings.Join(parts, ", "), strings.Join(restrict, ", "))
	}
	for _, h := range []*[]string{&l.Server.Hosts, &l.Peer.Hosts} {
		*h = append(*h, "127.0.0.1", "localhost")
		slices.Sort(*h)
		*h = slices.Compact(*h)
	}
	if err := healthy(ctx, c); err != nil {
		return nil, none, err
	}
	return ca, l, nil
}

// TakeOver takes over issuing the certificates of a fully adopted cluster
// with the operator's CA (o): after TakeOverCheck, it moves aside any
// certificate set of Steward's own in the certificate directory (a CA
// other than this one), imports the CA there, issues Steward's server,
// peer and admin client certificates from it, and saves and runs the plan
// that restarts each member with them (one at a time, leadership moved
// first, behind the health gate) and then drops the operator's files from
// the spec. The operator's files are read, never written or removed.
func TakeOver(ctx context.Context, c *cluster.Cluster, o TakeOverOptions) (*plan.Plan, error) {
	store := c.Plans()
	if _, err := plan.Admit(store, admitTakeOver); err != nil {
		return nil, err
	}
	now := time.Now()
	ca, leaves, err := TakeOverCheck(ctx, c, o, now)
	if err != nil {
		return nil, err
	}
	if err := certs.TakeOver(ctx, c, ca, leaves, now); err != nil {
		return nil, err
	}
	p := &plan.Plan{ID: plan.NewID(plan.KindCertsTakeOver, now), Kind: plan.KindCertsTakeOver, State: plan.Pending, CreatedAt: now.UTC()}
	// The members in spec order, the leader last (rolling.Order): with
	// pendingSwitches, one leadership transfer in all.
	var names []string
	for _, m := range c.Spec.Members {
		names = append(names, m.Name)
	}
	leader := ""
	if st, err := status.Get(ctx, c); err == nil {
		leader = st.Cluster.Leader
	}
	for _, name := range rolling.Order(names, leader) {
		p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepTakeOverSwitch, Member: name, State: plan.Pending,
			Description: "restart " + name + " with Steward's certificate files (leadership moved away first) and wait until it is healthy and caught up"})
	}
	p.Steps = append(p.Steps, plan.Step{Index: len(p.Steps), Kind: StepTakeOverRecord, State: plan.Pending,
		Description: "drop the operator's certificate files from the spec: Steward issues and renews the certificates from now on"})
	if err := store.Save(ctx, p); err != nil {
		return nil, err
	}
	return p, RunTakeOver(ctx, c, p.ID)
}

// RunTakeOver runs the take-over plan id from its first step not done.
func RunTakeOver(ctx context.Context, c *cluster.Cluster, id string) error {
	return plan.Run(ctx, c.Plans(), id, &TakeOverExecutor{C: c}, c.Progress)
}

// TakeOverExecutor runs the steps of a take-over plan. Every step is
// idempotent.
type TakeOverExecutor struct {
	C *cluster.Cluster
	// HealthTimeout bounds the wait for a restarted member (default 2
	// minutes, or the plan's HealthTimeoutSeconds).
	HealthTimeout time.Duration
}

// Execute implements plan.Executor.
func (e *TakeOverExecutor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	c, wait, err := e.C.ForStep(p, e.HealthTimeout)
	if err != nil {
		return err
	}
	e.C, e.HealthTimeout = c, wait
	switch s.Kind {
	case StepTakeOverSwitch:
		return e.switchMember(ctx, s.Member, pendingSwitches(p, s.Index))
	case StepTakeOverRecord:
		return e.record(ctx)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// switchMember points the member's adopted certificate files at Steward's
// in the spec, and restarts it with them unless its client port serves
// Steward's server certificate already: a rolling turn (health gate,
// leadership moved away to a member not in pending, the switches still to
// come, restart, caught up).
func (e *TakeOverExecutor) switchMember(ctx context.Context, name string, pending []string) error {
	c := e.C
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	f := pki.FilesIn(c.CertDir())
	if !c.Spec.OperatorCerts() {
		return nil // recorded: every member runs on Steward's files
	}
	want := &spec.AdoptedTLS{CA: f.CA, ServerCert: f.ServerCert, ServerKey: f.ServerKey, PeerCert: f.PeerCert, PeerKey: f.PeerKey}
	if m.Adopted.TLS == nil || *m.Adopted.TLS != *want {
		next := c.Spec.Clone()
		nm, _ := next.Member(name)
		nm.Adopted.TLS = want
		if err := c.SaveSpec(ctx, next); err != nil {
			return err
		}
		if m, err = c.Member(name); err != nil {
			return err
		}
	}
	if serves(ctx, c, m, f) {
		return nil
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return fmt.Errorf("status of cluster %s: %w", c.Spec.Name, err)
	}
	pid := 0
	turn := rolling.Action{
		Gate: func(st *status.Status, _ string) error { return allHealthy(c, st) },
		Act: func(ctx context.Context, _ *status.Status, name string) error {
			ac, err := c.RuntimeFor(m)
			if err != nil {
				return err
			}
			if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
				return fmt.Errorf("configure member %s on agent %s: %w", name, m.Agent, err)
			}
			ms, err := ac.Restart(ctx, name)
			if err != nil {
				return fmt.Errorf("restart member %s: %w", name, err)
			}
			pid = ms.PID
			return nil
		},
		CaughtUp: func(ctx context.Context, name string) error {
			wait := e.HealthTimeout
			if wait <= 0 {
				wait = defaultWait
			}
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			if err := status.WaitCaughtUp(wctx, c, name, pid, pollInterval); err != nil {
				return fmt.Errorf("health gate after restarting %s with Steward's certificates: waited %s: %w", name, wait, err)
			}
			if !serves(ctx, c, m, f) {
				return fmt.Errorf("member %s restarted but does not serve Steward's server certificate %s", name, f.ServerCert)
			}
			c.Progress.Say("  %s restarted with Steward's certificates, healthy and caught up", name)
			return nil
		},
		Progress: c.Progress,
	}
	return turn.Member(ctx, rolling.Of(c), st, name, pending)
}

// pendingSwitches is the members of the switch steps after step index
// that are not done, in order, for rolling.Transferee.
func pendingSwitches(p *plan.Plan, index int) []string {
	var out []string
	for _, s := range p.Steps {
		if s.Kind == StepTakeOverSwitch && s.Index > index && s.State != plan.Done {
			out = append(out, s.Member)
		}
	}
	return out
}

// serves reports whether the member's client port presents the server
// certificate of f in a live handshake.
func serves(ctx context.Context, c *cluster.Cluster, m spec.Member, f pki.Files) bool {
	want, err := pki.Serial(f.ServerCert)
	if err != nil {
		return false
	}
	hp, err := spec.HostPort(m.ClientURL)
	if err != nil {
		return false
	}
	pool, err := pki.CAPool(f.CA)
	if err != nil {
		return false
	}
	pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cert, err := pki.ServedCert(hctx, hp, pool, &pair)
	return err == nil && cert != nil && fmt.Sprintf("%x", cert.SerialNumber) == want
}

// record drops the operator's certificate files from the spec (the
// external block's and each member's adopted.tls) and hands each agent the
// member configs with Steward's client certificate for its health checks.
func (e *TakeOverExecutor) record(ctx context.Context) error {
	c := e.C
	if c.Spec.OperatorCerts() {
		next := c.Spec.Clone()
		next.External.CAFile, next.External.CertFile, next.External.KeyFile = "", "", ""
		for i := range next.Members {
			if next.Members[i].Adopted != nil {
				next.Members[i].Adopted.TLS = nil
			}
		}
		if err := c.SaveSpec(ctx, next); err != nil {
			return err
		}
	}
	for _, m := range c.Spec.Members {
		ac, err := c.RuntimeFor(m)
		if err != nil {
			return err
		}
		// A running member keeps its process: the files are the same.
		if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
			return fmt.Errorf("configure member %s on agent %s: %w", m.Name, m.Agent, err)
		}
	}
	c.Progress.Say("  the certificates of cluster %s are Steward's: the spec names the operator's files no more", c.Spec.Name)
	return nil
}
