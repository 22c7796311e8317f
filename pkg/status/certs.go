package status

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// CondCertificatesReady is False when a certificate Steward manages has
// expired, expires within the spec's warning window (tls.expiryWarning),
// cannot be read, or is served and does not verify against the cluster CA.
const CondCertificatesReady = "CertificatesReady"

// Certificates lists every certificate of the cluster: the files of this
// machine's certificate directory (pki.Inventory) and, for each member's
// client and peer address and each remote agent (seen by the admin), the certificate its TLS
// handshake presents now (a certificate replaced on disk but not yet
// loaded shows up as a different serial). An address that does not answer
// is listed with its Error.
func Certificates(ctx context.Context, c *cluster.Cluster) ([]pki.CertInfo, error) {
	if c.Spec.TLS.Disabled {
		return nil, nil
	}
	if c.Spec.OperatorCerts() {
		return append(externalInventory(c), ServedCerts(ctx, c, "")...), nil
	}
	inv, err := pki.Inventory(c.CertDir())
	if err != nil {
		return nil, err
	}
	return append(inv, ServedCerts(ctx, c, "")...), nil
}

// ServedCerts reads the certificates the members and remote agents serve
// (the agents' only for the admin: Cluster.Admin), concurrently, each handshake within 2 seconds (the probes of status take
// as long), their chains verified against the CA file caFile ("": the
// cluster CA).
func ServedCerts(ctx context.Context, c *cluster.Cluster, caFile string) []pki.CertInfo {
	type target struct{ name, addr string }
	var ts []target
	for _, m := range c.Spec.Members {
		for _, u := range []struct{ what, url string }{{"client", m.ClientURL}, {"peer", m.PeerURL}} {
			if hp, err := spec.HostPort(u.url); err == nil {
				ts = append(ts, target{"member " + m.Name + " " + u.what, hp})
			}
		}
	}
	// The agents' API lets in only the admin: a host's copy of the spec
	// (a joined host, a member pod: its client certificate is the host's)
	// does not knock, or every status of its loops would leave a refused
	// handshake in each agent's log.
	admin := c.Admin()
	for _, a := range c.Spec.Agents {
		if a.Remote() && admin {
			ts = append(ts, target{"agent " + a.Name, strings.TrimPrefix(a.Endpoint(), "https://")})
		}
	}
	f := pki.FilesIn(c.CertDir())
	if c.Spec.OperatorCerts() {
		// The operator's certificate, on peer ports too: there is no
		// peer certificate of Steward's.
		f.CA, f.ClientCert, f.ClientKey = c.Spec.ClientFiles(c.Dir)
		f.PeerCert, f.PeerKey = f.ClientCert, f.ClientKey
	}
	out := make([]pki.CertInfo, len(ts))
	if caFile == "" {
		caFile = f.CA
	}
	pool, err := pki.CAPool(caFile)
	if err != nil {
		for i, t := range ts {
			out[i] = pki.CertInfo{Name: t.name, Endpoint: t.addr, Error: err.Error()}
		}
		return out
	}
	var client, peer *tls.Certificate
	if pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey); err == nil {
		client = &pair
	}
	// A peer port takes only the peer certificate (--peer-cert-allowed-cn):
	// any other would be refused, and every status would leave a "rejected
	// connection on peer endpoint" warning in the member's log.
	if pair, err := tls.LoadX509KeyPair(f.PeerCert, f.PeerKey); err == nil {
		peer = &pair
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() {
			// out[i] is written by this goroutine alone, read after Wait.
			cc := client
			if strings.HasSuffix(t.name, " peer") && peer != nil {
				cc = peer
			}
			cert, err := pki.ServedCert(ctx, t.addr, pool, cc)
			info := pki.CertInfo{Name: t.name}
			if cert != nil {
				info = pki.Describe(t.name, cert, time.Now())
			}
			info.Endpoint = t.addr
			if err != nil {
				info.Error = err.Error()
			}
			out[i] = info
		})
	}
	wg.Wait()
	return out
}

// CertificatesCondition computes CertificatesReady from an inventory
// (Certificates).
func CertificatesCondition(c *cluster.Cluster, inv []pki.CertInfo, now time.Time) Condition {
	cond := Condition{Type: CondCertificatesReady, Status: "True", Reason: "CertificatesValid"}
	if c.Spec.TLS.Disabled {
		cond.Reason, cond.Message = "TLSDisabled", "TLS is off: there are no certificates"
		return cond
	}
	v, _ := c.Spec.TLS.Validity()
	var expired, soon, unreadable, untrusted, caHolds []string
	var next *pki.CertInfo
	for i := range inv {
		ci := &inv[i]
		if ci.IsCA && ci.File != "" && ci.Error == "" && ci.NotAfter.After(now) &&
			(pki.Validity{Leaf: v.Leaf, RenewBefore: v.RenewBefore}).CAHoldsRenewal(ci.NotAfter, now) {
			// pki.AtCALimit: its leaves end with it and are no longer renewed.
			caHolds = append(caHolds, fmt.Sprintf("%s %q (in %s)", ci.Name, ci.Subject, ci.NotAfter.Sub(now).Round(time.Second)))
		}
		switch {
		case ci.Error != "" && ci.File != "":
			unreadable = append(unreadable, fmt.Sprintf("%s (%s)", ci.Name, ci.Error))
			continue
		case ci.Error != "" && ci.Serial == "":
			continue // a member or agent that does not answer: other conditions say so
		case ci.Error != "" && ci.NotAfter.After(now):
			// Served, and not expired: the verification against the
			// cluster CA failed (another CA, a name it does not cover).
			untrusted = append(untrusted, fmt.Sprintf("%s (%s)", ci.Name, ci.Error))
			continue
		}
		left := ci.NotAfter.Sub(now)
		switch {
		case left <= 0:
			expired = append(expired, fmt.Sprintf("%s (%s ago)", ci.Name, (-left).Round(time.Second)))
		case left <= v.ExpiryWarning:
			soon = append(soon, fmt.Sprintf("%s (in %s)", ci.Name, left.Round(time.Second)))
		}
		if next == nil || ci.NotAfter.Before(next.NotAfter) {
			next = ci
		}
	}
	var parts []string
	add := func(what string, names []string) {
		if len(names) > 0 {
			parts = append(parts, what+": "+strings.Join(names, ", "))
		}
	}
	add("expired", expired)
	add(fmt.Sprintf("expires within %s", v.ExpiryWarning), soon)
	add("cannot be read", unreadable)
	add("served but not trusted by the cluster CA", untrusted)
	if len(caHolds) > 0 {
		parts = append(parts, fmt.Sprintf("the CA expires within the renewal margin of %s: %s; the certificates it issues end with it and can no longer be renewed: rotate the CA", v.RenewBefore, strings.Join(caHolds, ", ")))
	}
	switch {
	case len(expired) > 0:
		cond.Status, cond.Reason = "False", "CertificateExpired"
	case len(unreadable) > 0:
		cond.Status, cond.Reason = "False", "CertificateUnreadable"
	case len(untrusted) > 0:
		cond.Status, cond.Reason = "False", "CertificateNotTrusted"
	case len(soon) > 0:
		cond.Status, cond.Reason = "False", "CertificateExpiringSoon"
	case len(caHolds) > 0:
		cond.Status, cond.Reason = "False", "CAExpiresSoon"
	}
	if len(parts) > 0 {
		cond.Message = strings.Join(parts, "; ")
		return cond
	}
	if next == nil {
		cond.Status, cond.Reason, cond.Message = "Unknown", "NoCertificates", "no certificate could be read"
		return cond
	}
	cond.Message = fmt.Sprintf("%d certificates valid; the next to expire is %s in %s", len(inv), next.Name, next.NotAfter.Sub(now).Round(time.Second))
	return cond
}

// externalInventory lists an attached cluster's certificates: the
// operator's CA and client certificate files, read and never written.
func externalInventory(c *cluster.Cluster) []pki.CertInfo {
	ca, cert, _ := c.Spec.ClientFiles(c.Dir)
	now := time.Now()
	return append(pki.DescribeFile("external ca", ca, now), pki.DescribeFile("external client", cert, now)...)
}
