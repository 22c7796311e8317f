package certs

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// The joined hosts' part of a CA rotation (package carotate): the caller
// holds the certificate lock (Lock) and has done the same work
// in this machine's certificate directory first.

// PushTrustBundle hands this machine's trust bundle (ca.crt: during a CA
// rotation old + new, then new alone) to every joined host's agent (PUT
// /v1/ca), which checks it against the host's leaves and the coordinator's
// certificate and installs it as the host's ca.crt (one atomic rename; the
// same bundle again changes nothing, so a re-run is safe). Every host is
// tried; those that fail (unreachable: each call waits at most 10 s; a
// refusal) are returned in the joined error, each naming its host.
func PushTrustBundle(ctx context.Context, c *cluster.Cluster) error {
	hosts := hostset.Remote(c.Spec)
	if len(hosts) == 0 {
		return nil
	}
	if err := c.CheckCoordinator(ctx); err != nil {
		return fmt.Errorf("push the trust bundle: refusing: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(c.CertDir(), pki.CACert))
	if err != nil {
		return fmt.Errorf("push the trust bundle: %w", err)
	}
	return hostset.Do(ctx, hosts, hostset.Options{Limit: 1}, func(ctx context.Context, h spec.Agent) error {
		ac, err := c.Agent(h.Name)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, hostCallTimeout)
		tb, err := ac.PutTrustBundle(cctx, b)
		cancel()
		if err != nil {
			return fmt.Errorf("install the trust bundle: %w", err)
		}
		if tb.Changed {
			c.Progress.Say("  host %s trusts %v", h.Name, tb.CAs)
		}
		return nil
	})
}

// RotateHostLeaves reissues the leaves of every joined host
// (pki.HostLeafNames) from the next CA of the CA rotation in this
// machine's certificate directory (RotationReissueHost: the host's
// key kept, the leaf followed by the next CA cross-signed by the old one,
// so a member that still trusts the old CA alone verifies it), pushes them
// (PUT /v1/certs/NAME), waits within timeout until the host's agent and
// members serve them in live handshakes, and drops the previous ones. A
// leaf the next CA signed already is left alone (a re-run), and its
// previous copy, if a crash left one, dropped once it is served. Every host is
// tried; the failures are joined, each naming its host.
func RotateHostLeaves(ctx context.Context, c *cluster.Cluster, timeout time.Duration) ([]pki.Renewal, error) {
	hosts := hostset.Remote(c.Spec)
	if len(hosts) == 0 {
		return nil, nil
	}
	if err := c.CheckCoordinator(ctx); err != nil {
		return nil, fmt.Errorf("CA rotation of the hosts' certificates: refusing to sign: %w", err)
	}
	v := c.Validity()
	dir := c.CertDir()
	sign := func(cur *x509.Certificate, _ []*x509.Certificate, now time.Time) ([]byte, bool, error) {
		certPEM, _, done, err := RotationReissueHost(dir, v, cur, now)
		return certPEM, done, err
	}
	return renewHosts(ctx, c, hosts, pki.HostLeafNames, sign, true, timeout)
}

// RollbackHostLeaves is RotateHostLeaves' way back (a CA rotation rolled
// back before it dropped the old CA): every joined host's leaves
// (pki.HostLeafNames) that the next CA signed are reissued by the old CA
// (RollbackReissueHost: the host's key kept, the leaf alone), pushed
// (PUT /v1/certs/NAME), waited for within timeout until the host's agent
// and members serve them in live handshakes, and the previous ones
// dropped. A leaf the old CA signed already is left alone (a re-run), and
// its previous copy, if a crash left one, dropped once it is served. Every
// host is tried; the failures are joined, each naming its host.
func RollbackHostLeaves(ctx context.Context, c *cluster.Cluster, timeout time.Duration) ([]pki.Renewal, error) {
	hosts := hostset.Remote(c.Spec)
	if len(hosts) == 0 {
		return nil, nil
	}
	if err := c.CheckCoordinator(ctx); err != nil {
		return nil, fmt.Errorf("CA rollback of the hosts' certificates: refusing to sign: %w", err)
	}
	v := c.Validity()
	dir := c.CertDir()
	sign := func(cur *x509.Certificate, _ []*x509.Certificate, now time.Time) ([]byte, bool, error) {
		return RollbackReissueHost(dir, v, cur, now)
	}
	return renewHosts(ctx, c, hosts, pki.HostLeafNames, sign, true, timeout)
}

// RetireHostCross is the last step of a CA rotation on the joined hosts,
// once every member was restarted trusting the new CA alone: each host's
// leaves (pki.HostLeafNames), served until now followed by the new CA
// cross-signed by the old one, are installed again as the leaf alone
// (RotationRetireCrossHost; PUT /v1/certs/NAME: the same certificate
// and key), waited for within timeout until the host's agent and members
// serve them, and their previous copies dropped. A leaf already alone is
// left as it is (a re-run), and its previous copy, if a crash left one,
// dropped. Every host is tried; the failures are joined, each naming its
// host.
func RetireHostCross(ctx context.Context, c *cluster.Cluster, timeout time.Duration) ([]pki.Renewal, error) {
	hosts := hostset.Remote(c.Spec)
	if len(hosts) == 0 {
		return nil, nil
	}
	if err := c.CheckCoordinator(ctx); err != nil {
		return nil, fmt.Errorf("CA rotation of the hosts' certificates: refusing: %w", err)
	}
	dir := c.CertDir()
	sign := func(cur *x509.Certificate, chain []*x509.Certificate, _ time.Time) ([]byte, bool, error) {
		return RotationRetireCrossHost(dir, cur, chain)
	}
	return renewHosts(ctx, c, hosts, pki.HostLeafNames, sign, true, timeout)
}

// WaitOldCARetired waits within timeout until no member (client and peer
// port) and no joined host's agent serves, in a new TLS handshake, a chain
// that the CA in oldCAFile (a finished rotation's old CA, pki/ca-old.crt)
// verifies as the only root: the end of a CA rotation, once the leaves are
// served without the cross-signed CA. A member that does not answer is
// skipped (it loads its files when it starts).
func WaitOldCARetired(ctx context.Context, c *cluster.Cluster, oldCAFile string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, ci := range status.ServedCerts(ctx, c, oldCAFile) {
			if ci.Serial != "" && ci.Error == "" {
				bad = append(bad, fmt.Sprintf("%s (serial %s)", ci.Name, ci.Serial))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			slices.Sort(bad)
			return fmt.Errorf("the old CA (%s) still verifies what these serve after %s: %s", oldCAFile, timeout, strings.Join(bad, ", "))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
