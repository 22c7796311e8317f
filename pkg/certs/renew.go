package certs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/status"
)

// certLockPath is the lock every writer of the certificate directory's
// leaves holds: a renewal (local or of the hosts) and each file step of a
// CA rotation, so a renewal signed with the old CA never lands on a leaf
// the rotation reissued.
func certLockPath(c *cluster.Cluster) string { return filepath.Join(c.Dir, "run", "certs-renew.lock") }

// Lock takes the certificate directory's lock (certLockPath),
// waiting up to wait for a renewal that holds it (a renewal holds it while
// it waits for the members to serve what it wrote: up to a minute).
func Lock(ctx context.Context, c *cluster.Cluster, wait time.Duration) (*filelock.Lock, error) {
	lock, err := waitForLock(ctx, certLockPath(c), wait)
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
func HostLeaves(c *cluster.Cluster) ([]string, error) {
	names, err := pki.Names(c.CertDir())
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, pki.ClientsDir+"/") }), nil
}

// Renew renews the leaves of this machine's certificate directory
// (RenewDir: the named ones, or all; only those due unless force), then
// waits until every member on this machine serves the renewed server and
// peer certificates in new TLS handshakes (etcd loads its certificate files
// at each handshake), and only then drops the previous certificates kept
// beside them. A member that does not show the new serial within timeout
// is an error; its previous certificate stays.
func Renew(ctx context.Context, c *cluster.Cluster, names []string, force bool, timeout time.Duration) ([]pki.Renewal, error) {
	if c.Spec.TLS.Disabled {
		return nil, errors.New("renew certificates: TLS is off in the spec")
	}
	if err := c.RequireOwnCerts("renew certificates"); err != nil {
		return nil, err
	}
	// One renewal at a time per directory: the agents' loops (several
	// agents may share a directory) and `steward certs renew`.
	lock, err := filelock.TryLock(certLockPath(c))
	if errors.Is(err, filelock.ErrHeld) {
		return nil, fmt.Errorf("renew certificates: %w: another renewal of %s is running", ErrRenewalRunning, c.CertDir())
	}
	if err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	defer lock.Release()
	rs, err := RenewDir(c.CertDir(), c.Validity(), names, force, time.Now())
	if err != nil || len(rs) == 0 {
		return rs, err
	}
	if err := WaitServed(ctx, c, rs, timeout); err != nil {
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
func WaitServed(ctx context.Context, c *cluster.Cluster, rs []pki.Renewal, timeout time.Duration) error {
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
	return pollServed(ctx, c, timeout, "the previous certificates are kept beside them", func(ci pki.CertInfo) string {
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
func pollServed(ctx context.Context, c *cluster.Cluster, timeout time.Duration, kept string, stale func(pki.CertInfo) string) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, ci := range status.ServedCerts(ctx, c, "") {
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
