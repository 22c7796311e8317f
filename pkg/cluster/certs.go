package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// CondCertificatesReady is False when a certificate Steward manages has
// expired, expires within the spec's warning window (tls.expiryWarning),
// cannot be read, or is served and does not verify against the cluster CA.
const CondCertificatesReady = "CertificatesReady"

// Certificates lists every certificate of the cluster: the files of this
// machine's certificate directory (pki.Inventory) and, for each member's
// client and peer address and each remote agent, the certificate its TLS
// handshake presents now (a certificate replaced on disk but not yet
// loaded shows up as a different serial). An address that does not answer
// is listed with its Error.
func (c *Cluster) Certificates(ctx context.Context) ([]pki.CertInfo, error) {
	if c.Spec.TLS.Disabled {
		return nil, nil
	}
	if c.Spec.OperatorCerts() {
		return append(c.externalInventory(), c.servedCerts(ctx)...), nil
	}
	inv, err := pki.Inventory(c.CertDir())
	if err != nil {
		return nil, err
	}
	return append(inv, c.servedCerts(ctx)...), nil
}

// servedCerts reads the certificates the members and remote agents serve,
// concurrently, each handshake within 2 seconds (the probes of status take as long).
func (c *Cluster) servedCerts(ctx context.Context) []pki.CertInfo {
	return c.servedCertsVerified(ctx, "")
}

// servedCertsVerified is servedCerts with the served chains verified
// against the CA file caFile instead of the cluster CA ("": the cluster
// CA).
func (c *Cluster) servedCertsVerified(ctx context.Context, caFile string) []pki.CertInfo {
	type target struct{ name, addr string }
	var ts []target
	for _, m := range c.Spec.Members {
		for _, u := range []struct{ what, url string }{{"client", m.ClientURL}, {"peer", m.PeerURL}} {
			if hp, err := spec.HostPort(u.url); err == nil {
				ts = append(ts, target{"member " + m.Name + " " + u.what, hp})
			}
		}
	}
	for _, a := range c.Spec.Agents {
		if a.Remote() {
			ts = append(ts, target{"agent " + a.Name, strings.TrimPrefix(a.Endpoint(), "https://")})
		}
	}
	f := pki.FilesIn(c.CertDir())
	if c.Spec.OperatorCerts() {
		// The operator's certificate, on peer ports too: there is no
		// peer certificate of Steward's.
		f.CA, f.ClientCert, f.ClientKey = c.clientFiles()
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
func (c *Cluster) CertificatesCondition(inv []pki.CertInfo, now time.Time) Condition {
	cond := Condition{Type: CondCertificatesReady, Status: "True", Reason: "CertificatesValid"}
	if c.Spec.TLS.Disabled {
		cond.Reason, cond.Message = "TLSDisabled", "TLS is off: there are no certificates"
		return cond
	}
	v, _ := c.Spec.TLS.Validity()
	var expired, soon, unreadable, untrusted []string
	var next *pki.CertInfo
	for i := range inv {
		ci := &inv[i]
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
	switch {
	case len(expired) > 0:
		cond.Status, cond.Reason = "False", "CertificateExpired"
	case len(unreadable) > 0:
		cond.Status, cond.Reason = "False", "CertificateUnreadable"
	case len(untrusted) > 0:
		cond.Status, cond.Reason = "False", "CertificateNotTrusted"
	case len(soon) > 0:
		cond.Status, cond.Reason = "False", "CertificateExpiringSoon"
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

// certLockPath is the lock every writer of the certificate directory's
// leaves holds: a renewal (local or of the hosts) and each file step of a
// CA rotation, so a renewal signed with the old CA never lands on a leaf
// the rotation reissued.
func (c *Cluster) certLockPath() string { return filepath.Join(c.Dir, "run", "certs-renew.lock") }

// LockCertificates takes the certificate directory's lock (certLockPath),
// waiting up to wait for a renewal that holds it (a renewal holds it while
// it waits for the members to serve what it wrote: up to a minute).
func (c *Cluster) LockCertificates(ctx context.Context, wait time.Duration) (*filelock.Lock, error) {
	lock, err := waitForLock(ctx, c.certLockPath(), wait)
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("%w: another renewal of %s held the lock for %s", ErrRenewalRunning, c.CertDir(), wait)
	}
	return lock, err
}

// waitForLock takes the lock at path, trying every 200 ms for up to wait;
// after that the error wraps filelock.ErrHeld.
func waitForLock(ctx context.Context, path string, wait time.Duration) (*filelock.Lock, error) {
	deadline := time.Now().Add(wait)
	for {
		lock, err := filelock.TryLock(path)
		if !errors.Is(err, filelock.ErrHeld) || time.Now().After(deadline) {
			return lock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ErrRenewalRunning: another process renews the certificates of this
// directory right now.
var ErrRenewalRunning = errors.New("a certificate renewal is running")

// HostLeaves lists the leaves of this machine's certificate directory that
// renew in place (server, peer, client, agent), leaving out the client
// certificates issued for the users of etcd, whose copies live with their
// users: those are renewed by name, and copied again.
func (c *Cluster) HostLeaves() ([]string, error) {
	names, err := pki.Names(c.CertDir())
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, pki.ClientsDir+"/") }), nil
}

// RenewCerts renews the leaves of this machine's certificate directory
// (pki.Renew: the named ones, or all; only those due unless force), then
// waits until every member on this machine serves the renewed server and
// peer certificates in new TLS handshakes (etcd loads its certificate files
// at each handshake), and only then drops the previous certificates kept
// beside them. A member that does not show the new serial within timeout
// is an error; its previous certificate stays.
func (c *Cluster) RenewCerts(ctx context.Context, names []string, force bool, timeout time.Duration) ([]pki.Renewal, error) {
	if c.Spec.TLS.Disabled {
		return nil, errors.New("renew certificates: TLS is off in the spec")
	}
	if err := c.RequireOwnCerts("renew certificates"); err != nil {
		return nil, err
	}
	// One renewal at a time per directory: the agents' loops (several
	// agents may share a directory) and `steward certs renew`.
	lock, err := filelock.TryLock(c.certLockPath())
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("renew certificates: %w: another renewal of %s is running", ErrRenewalRunning, c.CertDir())
	}
	if err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	defer lock.Release()
	rs, err := pki.Renew(c.CertDir(), c.Validity(), names, force, time.Now())
	if err != nil || len(rs) == 0 {
		return rs, err
	}
	if err := c.WaitServed(ctx, rs, timeout); err != nil {
		return rs, err
	}
	for _, r := range rs {
		if err := pki.ForgetPrevious(r); err != nil {
			return rs, fmt.Errorf("renew certificates: %w", err)
		}
	}
	return rs, nil
}

// WaitServed waits until the local members' live handshakes present the
// renewed server ("client" address) and peer certificates of rs.
func (c *Cluster) WaitServed(ctx context.Context, rs []pki.Renewal, timeout time.Duration) error {
	want := map[string]string{} // served name suffix -> serial
	for _, r := range rs {
		switch r.Name {
		case "server":
			want["client"] = r.NewSerial
		case "peer":
			want["peer"] = r.NewSerial
		}
	}
	if len(want) == 0 {
		return nil
	}
	return c.pollServed(ctx, timeout, "the previous certificates are kept beside them", func(ci pki.CertInfo) string {
		if ci.Serial == "" {
			return "" // not running: it loads the new files when it starts
		}
		if a, ok := c.Spec.Member(memberOf(ci.Name)); ok {
			if ag, ok := c.Spec.Agent(a.Agent); ok && ag.Remote() {
				return ""
			}
		}
		for what, serial := range want {
			if strings.HasSuffix(ci.Name, " "+what) && ci.Serial != serial {
				return serial
			}
		}
		return ""
	})
}

// pollServed reads the served certificates (live handshakes) once a second
// until no certificate is stale: one for which stale returns the serial it
// should present. After timeout it names each stale one, what it serves and
// where the previous certificates are (kept).
func (c *Cluster) pollServed(ctx context.Context, timeout time.Duration, kept string, stale func(pki.CertInfo) string) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, ci := range c.servedCerts(ctx) {
			if stale(ci) != "" {
				bad = append(bad, fmt.Sprintf("%s serves %s (error: %s)", ci.Name, orNone(ci.Serial), orNone(ci.Error)))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			slices.Sort(bad)
			return fmt.Errorf("renewed certificates not served after %s: %s; %s (%s)", timeout, strings.Join(bad, "; "), kept, pki.PrevSuffix)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// memberOf returns the member name of a served certificate's name
// ("member etcd-1 client").
func memberOf(name string) string {
	f := strings.Fields(name)
	if len(f) == 3 && f[0] == "member" {
		return f[1]
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
