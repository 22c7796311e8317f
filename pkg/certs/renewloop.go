// The automatic renewal of leaf certificates that each agent runs beside
// its supervisor (RunRenewal): before a leaf of its host reaches
// the end of its lifetime (at the spec's renewal point, tls.renewBefore),
// the loop reissues it with the same key and names (RenewDir), writes the
// certificate file with one atomic rename, waits until the members on this
// host serve it in new TLS handshakes (etcd loads its certificate files at
// each handshake: no member restarts), and then drops the previous
// certificate it kept beside it.
//
// Renewing needs the CA key, which only the coordinator's directory holds
// (pki.ErrNoCAKey): the loop of the agent on the coordinator's machine
// renews that directory's certificates (every member of a single-host
// cluster) and, one host after the other, the due leaves of the joined
// hosts, which it reissues with the keys the hosts keep and hands to their
// agents (RenewHosts). An agent of a joined host cannot sign: it
// reports that its host's certificates are due if the coordinator has not
// renewed them by their renewal point (see docs/certificates.md).

package certs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// RunRenewal renews the certificates of the Steward directory dir until ctx is
// done. It checks every tenth of the renewal margin (at least every
// second, at most every minute). It records that it is alive, and what it
// did, in the directory's renewal state (status.RenewalStatePath: every
// status.RenewalHeartbeat, and after each round), which `steward status`
// reports (status.CondCertificateRenewal); when ctx is done it records
// that it stopped. advise, when not nil, adds the command layer's advice
// to a round's error before it is logged and recorded (the commands that
// run the loop pass cli.LibraryAdvice): status shows the recorded text.
func RunRenewal(ctx context.Context, dir string, log *slog.Logger, advise func(error) error) {
	rec := newRecorder(dir, os.Getpid(), time.Now())
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		rec.heartbeat(ctx, log)
	}()
	var warned string // the last warning logged, so a lasting problem logs once
	for ctx.Err() == nil {
		wait, rs, err := round(ctx, dir, log)
		if err != nil && advise != nil {
			err = advise(err)
		}
		if ctx.Err() == nil {
			rec.round(time.Now(), rs, err, nextRenewal(dir))
		}
		if err != nil && ctx.Err() == nil && err.Error() != warned {
			log.Warn("certificate renewal", "err", err)
			warned = err.Error()
		} else if err == nil {
			warned = ""
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	<-hbDone
	rec.stop(time.Now(), log)
}

// round renews what is due once and returns how long to wait for the
// next, and what it renewed.
func round(ctx context.Context, dir string, log *slog.Logger) (time.Duration, []pki.Renewal, error) {
	wait, rs, err := renewDue(ctx, dir)
	for _, r := range rs {
		log.Info("certificate renewed", "host", r.Host, "name", r.Name, "file", r.File, "oldSerial", r.OldSerial, "newSerial", r.NewSerial, "notAfter", r.NotAfter)
	}
	return wait, rs, err
}

// renewDue is round without the log.
func renewDue(ctx context.Context, dir string) (time.Duration, []pki.Renewal, error) {
	var rs []pki.Renewal
	c, err := cluster.Open(dir)
	if errors.Is(err, cluster.ErrNoSpec) {
		return 5 * time.Second, rs, nil // a host the coordinator has not handed the spec yet
	}
	if err != nil {
		return 5 * time.Second, rs, err
	}
	if c.Spec.TLS.Disabled || c.Spec.OperatorCerts() {
		// An attached cluster's certificates are the operator's: never renewed here.
		return time.Minute, rs, nil
	}
	v := c.Validity().WithDefaults()
	wait := min(max(v.RenewBefore/10, time.Second), time.Minute)
	names, err := HostLeaves(c)
	if err != nil {
		return wait, rs, err
	}
	// Wait for the members at most half the margin: the next round must
	// come well before the renewed certificates would be due again.
	served := min(max(v.RenewBefore/2, 5*time.Second), time.Minute)
	if len(names) > 0 {
		rs, err = Renew(ctx, c, names, false, served)
	}
	if !errors.Is(err, ErrRenewalRunning) && hasCAKey(c) {
		// The coordinator's machine: it also renews the joined hosts'
		// leaves, which it signs and hands to their agents (even when a
		// local member did not serve its renewal in time).
		hrs, herr := RenewHosts(ctx, c, nil, false, served)
		rs = append(rs, hrs...)
		err = errors.Join(err, herr)
	}
	// Leaves left alone because they end with the CA: said once a round
	// instead of a reissue (the hosts' leaves, issued with the same
	// lifetime by the same CA, end with it too).
	if lerr := CALimited(c.CertDir(), v, names, time.Now()); lerr != nil && !errors.Is(err, ErrRenewalRunning) {
		err = errors.Join(err, lerr)
	}
	if errors.Is(err, pki.ErrRotationInProgress) {
		// A CA rotation whose plan reissues every leaf: wait for it, but
		// say so when no plan is running it (aborted): renewals would
		// otherwise stop without a word until the certificates expire.
		if p, perr := c.Plans().Latest(); perr == nil && !p.Active() {
			return wait, rs, refusal.New(ErrRotationNotRunning, "renewals wait for a CA rotation that is not running (plan %s is %s; %s is still there)", p.ID, p.State, pki.CANextCert)
		}
		return wait, rs, nil
	}
	if errors.Is(err, ErrRenewalRunning) {
		return wait, rs, nil // another renewal
	}
	if errors.Is(err, pki.ErrNoCAKey) {
		return wait, rs, ErrHostCannotSign
	}
	return wait, rs, err
}

// Errors of a renewal round the command layer adds advice to
// (cli.LibraryAdvice, through RunRenewal's advise).
var (
	// ErrRotationNotRunning: renewals wait for a CA rotation whose plan
	// no process runs (aborted); the command names what finishes it.
	ErrRotationNotRunning = errors.New("renewals wait for a CA rotation that is not running")
	// ErrHostCannotSign: a joined host's leaves are due and its directory
	// holds no CA key; the coordinator renews them (its loop, or by hand:
	// the command names how).
	ErrHostCannotSign = errors.New("this host's certificates are due for renewal and its directory holds no CA key: the coordinator renews them through this agent's API (its renewal loop); check that it reaches this host (docs/certificates.md)")
)

// hasCAKey reports whether the cluster's certificate directory holds the
// CA key (the coordinator's machine).
func hasCAKey(c *cluster.Cluster) bool {
	_, err := os.Stat(filepath.Join(c.CertDir(), pki.CAKey))
	return err == nil
}
