package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// hostCallTimeout bounds each call to a host's agent while renewing its
// certificates: an unreachable host costs this much, not the whole run.
const hostCallTimeout = 10 * time.Second

// RenewHosts renews the certificates of the joined hosts (every remote
// agent of the spec), one host after the other, with the CA key of this
// machine's certificate directory (the coordinator's; pki.ErrNoCAKey
// elsewhere). For each host and each of its leaves named (pki.HostLeafNames;
// all when names is empty, names of no host leaf ignored), due or, with
// force, all: the host's current certificate is read from its agent
// (GET /v1/certs/NAME over mutual TLS, the agent's identity checked), checked
// against the CA and the identity the leaf must have, reissued with the
// same key (Reissue), and pushed to the agent (PUT /v1/certs/NAME),
// which checks it and installs it keeping the previous one. Then the
// coordinator waits, within timeout, until new TLS handshakes with the
// host's agent and its members' client and peer ports present the new
// serials, and only then has the agent drop the previous certificates.
//
// A host that fails (unreachable, a refusal, a member that does not serve
// the renewal in time) is reported in the joined error, naming the host,
// and the others are still renewed. The renewals done are returned, with
// Host set, whether or not an error is. A coordinator another machine took
// over from (`steward takeover`) is refused (handover.ErrSuperseded) before
// it signs anything, and so is a renewal while a CA rotation runs
// (pki.ErrRotationInProgress: the rotation reissues the hosts' leaves).
func RenewHosts(ctx context.Context, c *cluster.Cluster, names []string, force bool, timeout time.Duration) ([]pki.Renewal, error) {
	if c.Spec.TLS.Disabled {
		return nil, errors.New("renew host certificates: TLS is off in the spec")
	}
	hosts := hostset.Remote(c.Spec)
	if len(hosts) == 0 {
		return nil, nil
	}
	leaves := pki.HostLeafNames
	if len(names) > 0 {
		leaves = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !slices.Contains(pki.HostLeafNames, n) })
		if len(leaves) == 0 {
			return nil, nil
		}
	}
	lock, err := filelock.TryLock(certLockPath(c))
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("renew host certificates: %w: another renewal of %s is running", ErrRenewalRunning, c.CertDir())
	}
	if err != nil {
		return nil, fmt.Errorf("renew host certificates: %w", err)
	}
	defer lock.Release()
	// A CA rotation reissues the hosts' leaves itself (RotateHostLeaves):
	// a renewal by the old CA in between would undo its work.
	if pki.RotationInProgress(c.CertDir()) {
		return nil, fmt.Errorf("renew host certificates: %w", pki.ErrRotationInProgress)
	}
	// A coordinator another machine took over from signs nothing: the new
	// one renews the hosts' leaves (its own loop), and two signers would
	// race each other's pushes.
	if err := c.CheckCoordinator(ctx); err != nil {
		return nil, fmt.Errorf("renew host certificates: refusing to sign: %w", err)
	}
	v := c.Validity()
	dir := c.CertDir()
	ca, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil, fmt.Errorf("renew host certificates: CA: %w", err)
	}
	renew := func(cur *x509.Certificate, _ []*x509.Certificate, now time.Time) ([]byte, bool, error) {
		// Not due, or ending as late as the CA allows (pki.AtCALimit:
		// the round reports that instead, CALimited).
		if !force && (!v.WithDefaults().Due(cur, now) || pki.AtCALimit(cur, ca, v.WithDefaults().Leaf, now)) {
			return nil, true, nil
		}
		certPEM, _, err := Reissue(dir, v, cur, now)
		return certPEM, false, err
	}
	return renewHosts(ctx, c, hosts, leaves, renew, false, timeout)
}

// hostLeafCN is the common name leaf of host agent must have
// (pki.IssueHost): a certificate a host returns for it that names another
// identity is not reissued.
func hostLeafCN(c *cluster.Cluster, agent, leaf string) string {
	switch leaf {
	case "server":
		return c.Spec.Name + "-server"
	case "peer":
		return c.Spec.Name + "-peer"
	case "agent":
		return pki.AgentCN(agent)
	default:
		return pki.HostCN(agent)
	}
}

// hostSigner returns the reissue of a host's current leaf cur, which the
// host serves followed by the CA certificates chain (PEM, what the host
// installs), or skip when it needs none.
type hostSigner func(cur *x509.Certificate, chain []*x509.Certificate, now time.Time) (certPEM []byte, skip bool, err error)

// renewHosts runs renewHost on every host in turn (one at a time, in the
// spec's order, until ctx ends: hostset.Each) and joins the failures, each
// naming its host.
func renewHosts(ctx context.Context, c *cluster.Cluster, hosts hostset.Hosts, leaves []string, sign hostSigner, settle bool, timeout time.Duration) ([]pki.Renewal, error) {
	rs := hostset.Each(ctx, hosts, hostset.Options{Limit: 1}, func(ctx context.Context, h spec.Agent) ([]pki.Renewal, error) {
		return renewHost(ctx, c, h, leaves, sign, settle, timeout)
	})
	var out []pki.Renewal
	for _, r := range rs {
		out = append(out, r.Value...)
	}
	return out, hostset.Join(rs, "")
}

// renewHost reissues the leaves of one host with sign (RenewHosts: the
// CA; RotateHostLeaves: a CA rotation's next CA), pushes them, waits until
// they are served and drops the previous ones. With settle, the leaves
// sign skips (done already: a re-run) are waited for and their previous
// copies dropped too, so a re-run after a crash between the push and the
// drop leaves none behind.
func renewHost(ctx context.Context, c *cluster.Cluster, h spec.Agent, leaves []string, sign hostSigner, settle bool, timeout time.Duration) ([]pki.Renewal, error) {
	ac, err := c.Agent(h.Name)
	if err != nil {
		return nil, err
	}
	var out, settled []pki.Renewal
	for _, name := range leaves {
		cctx, cancel := context.WithTimeout(ctx, hostCallTimeout)
		f, err := ac.HostCert(cctx, name)
		cancel()
		if err != nil {
			return out, fmt.Errorf("read its %s certificate: %w", name, err)
		}
		cur, chain, err := pki.ParseLeafChainPEM([]byte(f.PEM))
		if err != nil {
			return out, fmt.Errorf("its %s certificate: %w", name, err)
		}
		if want := hostLeafCN(c, h.Name, name); cur.Subject.CommonName != want {
			return out, fmt.Errorf("its %s certificate is for %q, not %q: not reissued", name, cur.Subject.CommonName, want)
		}
		certPEM, skip, err := sign(cur, chain, time.Now())
		if skip && err == nil {
			if settle {
				settled = append(settled, pki.Renewal{Host: h.Name, Name: name, NewSerial: fmt.Sprintf("%x", cur.SerialNumber)})
			}
			continue
		}
		if err != nil {
			return out, fmt.Errorf("its %s certificate: %w", name, err)
		}
		cctx, cancel = context.WithTimeout(ctx, hostCallTimeout)
		r, err := ac.PutHostCert(cctx, name, certPEM)
		cancel()
		if err != nil {
			return out, fmt.Errorf("install its renewed %s certificate: %w", name, err)
		}
		out = append(out, pki.Renewal{Host: h.Name, Name: r.Name, File: r.File, OldSerial: r.OldSerial, NewSerial: r.NewSerial, NotAfter: r.NotAfter})
	}
	all := append(slices.Clone(out), settled...)
	if len(all) == 0 {
		return nil, nil
	}
	if err := waitHostServed(ctx, c, h, all, timeout); err != nil {
		return out, err
	}
	for _, r := range all {
		cctx, cancel := context.WithTimeout(ctx, hostCallTimeout)
		err := ac.ForgetPreviousHostCert(cctx, r.Name)
		cancel()
		if err != nil {
			return out, fmt.Errorf("drop its previous %s certificate: %w", r.Name, err)
		}
	}
	return out, nil
}

// waitHostServed waits until new TLS handshakes with host h's agent and
// its members' client and peer ports present the renewed agent, server and
// peer certificates of rs (a member that does not run is skipped: it
// loads the new files when it starts).
func waitHostServed(ctx context.Context, c *cluster.Cluster, h spec.Agent, rs []pki.Renewal, timeout time.Duration) error {
	want := map[string]string{} // served name -> serial
	for _, r := range rs {
		switch r.Name {
		case "agent":
			want["agent "+h.Name] = r.NewSerial
		case "server", "peer":
			what := map[string]string{"server": "client", "peer": "peer"}[r.Name]
			for _, m := range c.Spec.Members {
				if m.Agent == h.Name {
					want["member "+m.Name+" "+what] = r.NewSerial
				}
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	return pollServed(ctx, c, timeout, "the host keeps the previous certificates beside them", func(ci pki.CertInfo) string {
		serial, ok := want[ci.Name]
		if !ok || (ci.Serial == "" && strings.HasPrefix(ci.Name, "member ")) || ci.Serial == serial {
			return ""
		}
		return serial
	})
}
