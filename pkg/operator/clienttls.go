package operator

// NAME-client-tls: the client certificate applications use, issued from
// the cluster's CA into the operator's Steward directory
// (pki/clients/NAME-client.crt and .key, where `steward certs list` and
// the CertificatesReady condition see it) and published in the Secret
// NAME-client-tls (docs/operator.md, "Certificates for applications").
//
// Invariants:
//   - It is renewed by the rule every leaf follows (pki.Validity.Due with
//     the cluster's validity: pkg/certs' renewal margin, a third of the
//     lifetime by default), with a new key; one that expired, cannot be
//     read, does not match its key or was not signed by the cluster's CA
//     is issued again (a Warning event first).
//   - No stale copy of its key stays on disk: an older operator's
//     clients-out/NAME-client.{crt,key} is removed once the Secret holds
//     the current pair (forgetStaleClientCopy), never before.
//   - Nothing is lost when a write fails: the pair it replaces is kept
//     beside it (pki.PrevSuffix) until the Secret holds the new one, and
//     only then removed (certs.ForgetPreviousClient, after the Secret's
//     update). A kept pair is never overwritten: it is what the Secret may
//     still hold.
//   - It is written under the certificate directory's lock (certs.Lock),
//     the lock of every other writer of its leaves, and never while a CA
//     rotation runs (the rotation reissues it).
//   - A certificate never outlives its CA (clientLifetime): under a CA
//     that expires before a renewal could give a later expiry, it is kept
//     as it is instead of being reissued at every reconcile (pki.AtCALimit,
//     the rule of the member leaves too).

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
)

// Event reasons of NAME-client-tls.
const (
	// ReasonClientCertRenewed (Normal): the Secret holds a new
	// certificate and key; the message says when it expires.
	ReasonClientCertRenewed = "ClientCertificateRenewed"
	// ReasonClientCertUnusable (Warning): the certificate expired or
	// cannot be used; a new one is issued next.
	ReasonClientCertUnusable = "ClientCertificateUnusable"
)

// ClientCertAction is what DecideClientCert decided.
type ClientCertAction string

// What becomes of NAME-client-tls's certificate.
const (
	// ClientCertFresh: valid and not due; nothing to do.
	ClientCertFresh ClientCertAction = "Fresh"
	// ClientCertIssue: none issued yet (a new cluster).
	ClientCertIssue ClientCertAction = "Issue"
	// ClientCertRenew: at or past its renewal point, still valid.
	ClientCertRenew ClientCertAction = "Renew"
	// ClientCertReissue: expired, unreadable, or not the cluster CA's:
	// a Warning event, then a new one.
	ClientCertReissue ClientCertAction = "Reissue"
	// ClientCertKeep: due, but nothing better can be issued now (the CA
	// expires before a renewal would give a later expiry), or a CA
	// rotation runs (it reissues the certificate itself).
	ClientCertKeep ClientCertAction = "Keep"
)

// ClientCertDecision is DecideClientCert's answer.
type ClientCertDecision struct {
	Action ClientCertAction
	// Why says what was found, for the events and the status.
	Why string
	// NotAfter is the current certificate's expiry (zero: none read).
	NotAfter time.Time
}

// DecideClientCert decides what becomes of NAME-client-tls's certificate
// cur (readErr: why it could not be read, os.ErrNotExist when there is
// none) at now: caPEM is the cluster's ca.crt (during a rotation, a
// bundle), v the cluster's validity, rotating whether a CA rotation runs.
// The renewal point is pki.Validity.Due, the rule of every leaf.
func DecideClientCert(cur *x509.Certificate, readErr error, caPEM []byte, v pki.Validity, rotating bool, now time.Time) ClientCertDecision {
	v = v.WithDefaults()
	d := ClientCertDecision{}
	if cur != nil {
		d.NotAfter = cur.NotAfter
	}
	switch {
	case rotating:
		d.Action, d.Why = ClientCertKeep, "a CA rotation runs: it reissues the certificate from the new CA"
		return d
	case errors.Is(readErr, os.ErrNotExist):
		d.Action, d.Why = ClientCertIssue, "no client certificate was issued yet"
		return d
	case readErr != nil:
		d.Action, d.Why = ClientCertReissue, fmt.Sprintf("the client certificate cannot be used: %v", readErr)
		return d
	case !now.Before(cur.NotAfter):
		d.Action, d.Why = ClientCertReissue, fmt.Sprintf("the client certificate expired at %s", cur.NotAfter.UTC().Format(time.RFC3339))
		return d
	}
	ca := signerIn(cur, caPEM)
	if ca == nil {
		d.Action, d.Why = ClientCertReissue, fmt.Sprintf("the client certificate (issuer %q) was not signed by the cluster's CA", cur.Issuer.CommonName)
		return d
	}
	if !v.Due(cur, now) {
		d.Action, d.Why = ClientCertFresh, fmt.Sprintf("valid until %s, renewed from %s", cur.NotAfter.UTC().Format(time.RFC3339),
			cur.NotAfter.Add(-v.RenewBefore).UTC().Format(time.RFC3339))
		return d
	}
	// Due. A renewal is cut at the CA's expiry: when that gives no later
	// expiry than the current one, renewing would only churn the Secret
	// at every reconcile (pki.AtCALimit, the rule of every leaf).
	if pki.AtCALimit(cur, ca, v.Leaf, now) {
		d.Action, d.Why = ClientCertKeep, fmt.Sprintf("due for renewal, but the CA %q expires at %s: no later certificate can be issued from it; replace the CA",
			ca.Subject.CommonName, ca.NotAfter.UTC().Format(time.RFC3339))
		return d
	}
	d.Action, d.Why = ClientCertRenew, fmt.Sprintf("at its renewal point (expires %s, renewal margin %s)", cur.NotAfter.UTC().Format(time.RFC3339), v.RenewBefore)
	return d
}

// signerIn returns the certificate of caPEM (one or more PEM certificates)
// that signed c, or nil.
func signerIn(c *x509.Certificate, caPEM []byte) *x509.Certificate {
	for rest := caPEM; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil
		}
		ca, err := x509.ParseCertificate(blk.Bytes)
		if err == nil && ca.IsCA && c.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
}

// clientCertName is the name of NAME-client-tls's certificate in the
// cluster's issued clients (pki/clients/NAME.crt): its common name.
func clientCertName(ec *v1alpha1.EtcdCluster) string { return ec.Name + "-client" }

// CheckClientCert is DecideClientCert for the files of c's directory.
func CheckClientCert(ec *v1alpha1.EtcdCluster, c *cluster.Cluster, now time.Time) (ClientCertDecision, error) {
	certDir := c.CertDir()
	caPEM, err := os.ReadFile(filepath.Join(certDir, pki.CACert))
	if err != nil {
		return ClientCertDecision{}, fmt.Errorf("client certificate for applications: %w", err)
	}
	cur, rerr := certs.ReadClient(certDir, clientCertName(ec))
	return DecideClientCert(cur, rerr, caPEM, c.Validity(), pki.RotationInProgress(certDir), now), nil
}

// IssueClientCert carries out d (Issue, Renew or Reissue; the others do
// nothing): a new certificate and key from the cluster's CA, the pair it
// replaces kept beside it until the Secret holds the new one
// (certs.ReissueClient). It returns the new certificate's expiry.
func IssueClientCert(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, d ClientCertDecision) (time.Time, error) {
	switch d.Action {
	case ClientCertIssue, ClientCertRenew, ClientCertReissue:
	default:
		return time.Time{}, nil
	}
	caPEM, err := os.ReadFile(filepath.Join(c.CertDir(), pki.CACert))
	if err != nil {
		return time.Time{}, fmt.Errorf("client certificate for applications: %w", err)
	}
	nc, err := certs.ReissueClient(ctx, c, clientCertName(ec), clientLifetime(caPEM, c.Validity(), time.Now()))
	if err != nil {
		return time.Time{}, fmt.Errorf("client certificate for applications: %w", err)
	}
	return nc.NotAfter, nil
}

// clientLifetime is the lifetime of NAME-client-tls's certificate: the
// default leaf lifetime (0), or up to a minute before the CA expires when
// that is sooner (a user's CA: spec.tls.caSecret), as pki cuts the other
// leaves; pki.IssueClient refuses a certificate outliving its CA.
func clientLifetime(caPEM []byte, v pki.Validity, now time.Time) time.Duration {
	ca, err := pki.ParseCertPEM(caPEM)
	if err != nil {
		return 0 // IssueClient reads the CA itself and says what is wrong
	}
	if l := clientLifetimeAt(ca, v, now); l < v.WithDefaults().Leaf {
		return l
	}
	return 0
}

// clientLifetimeAt is the lifetime a client certificate issued at now by
// ca gets: the leaf lifetime, cut pki.CACut before the CA expires
// (pki.LeafNotAfter).
func clientLifetimeAt(ca *x509.Certificate, v pki.Validity, now time.Time) time.Duration {
	return max(pki.LeafNotAfter(ca, v.WithDefaults().Leaf, now).Sub(now), time.Second)
}

// clientCertNote is what CertificatesReady says of NAME-client-tls: when
// it expires and when it is renewed, or why there is none to use ("" when
// the CA cannot be read: the inventory in the condition says why).
func clientCertNote(ec *v1alpha1.EtcdCluster, c *cluster.Cluster, now time.Time) string {
	d, err := CheckClientCert(ec, c, now)
	if err != nil {
		return ""
	}
	if d.NotAfter.IsZero() {
		return fmt.Sprintf("Secret %s: %s", clientTLSSecret(ec), d.Why)
	}
	v := c.Validity().WithDefaults()
	switch d.Action {
	case ClientCertKeep:
		return fmt.Sprintf("Secret %s expires at %s (%s)", clientTLSSecret(ec), d.NotAfter.UTC().Format(time.RFC3339), d.Why)
	case ClientCertFresh, ClientCertRenew:
		return fmt.Sprintf("Secret %s expires at %s and is renewed from %s", clientTLSSecret(ec), d.NotAfter.UTC().Format(time.RFC3339),
			d.NotAfter.Add(-v.RenewBefore).UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("Secret %s: %s", clientTLSSecret(ec), d.Why)
}

// ensureClientCert issues NAME-client-tls's certificate when there is
// none, renews it at its renewal point and issues it again when it
// expired or cannot be used (a Warning event first): the Secret built
// next holds it.
func (r *Reconciler) ensureClientCert(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster) error {
	d, err := CheckClientCert(ec, c, time.Now())
	if err != nil {
		return err
	}
	if d.Action == ClientCertReissue {
		r.event(ec, corev1.EventTypeWarning, ReasonClientCertUnusable, "RenewCertificates", "Secret %s: %s: issuing a new certificate and key", clientTLSSecret(ec), d.Why)
	}
	if _, err := IssueClientCert(ctx, ec, c, d); err != nil {
		if d.Action == ClientCertRenew {
			// Still valid: the Secret keeps the current one, and the
			// next reconcile tries again.
			r.event(ec, corev1.EventTypeWarning, "ClientCertificateRenewalFailed", "RenewCertificates", "Secret %s: %v", clientTLSSecret(ec), err)
			return nil
		}
		return err
	}
	return nil
}

// staleClientCopyDir is where operators before NAME-client-tls's renewal
// copied its certificate and key (clients-out/NAME-client.{crt,key} and
// ca.crt, the key 0600): nothing reads it since the Secret is built from
// pki/clients/, so it is only a stale copy of a private key.
const staleClientCopyDir = "clients-out"

// forgetStaleClientCopy removes the stale copy of NAME-client-tls's pair
// (staleClientCopyDir) from c's directory, and the directory once empty.
// It runs only after the Secret was written with the current pair
// (publishedClientCert): never before, so a copy is never the only one.
func forgetStaleClientCopy(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) error {
	dir := filepath.Join(c.Dir, staleClientCopyDir)
	name := clientCertName(ec)
	for _, f := range []string{name + ".key", name + ".crt", pki.CACert} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("client certificate for applications: remove the stale copy: %w", err)
		}
	}
	if left, err := os.ReadDir(dir); err == nil && len(left) == 0 {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("client certificate for applications: remove the stale copy: %w", err)
		}
	}
	return nil
}

// publishedClientCert runs once the Secret NAME-client-tls was written:
// the stale copy of its pair an older operator kept is removed
// (forgetStaleClientCopy), a pair kept by a renewal is removed, and the
// renewal reported (event
// ClientCertificateRenewed with the new expiry; lastOperation
// RenewCertificates).
func (r *Reconciler) publishedClientCert(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) error {
	if err := forgetStaleClientCopy(ec, c); err != nil {
		return err
	}
	certDir := c.CertDir()
	if !certs.PreviousClient(certDir, clientCertName(ec)) {
		return nil
	}
	if err := certs.ForgetPreviousClient(certDir, clientCertName(ec)); err != nil {
		return fmt.Errorf("client certificate for applications: %w", err)
	}
	nc, err := certs.ReadClient(certDir, clientCertName(ec))
	if err != nil {
		return fmt.Errorf("client certificate for applications: %w", err)
	}
	msg := fmt.Sprintf("Secret %s updated with a new certificate and key (serial %x), valid until %s", clientTLSSecret(ec), nc.SerialNumber,
		nc.NotAfter.UTC().Format(time.RFC3339))
	r.event(ec, corev1.EventTypeNormal, ReasonClientCertRenewed, "RenewCertificates", "%s", msg)
	if op := r.op(ec); op == nil || op.State != "Running" {
		r.setOp(ec, "RenewCertificates", "Succeeded", msg)
	}
	return nil
}
