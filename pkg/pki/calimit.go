package pki

import (
	"crypto/x509"
	"fmt"
	"time"
)

// The CA limit: a leaf never outlives its CA. A leaf issued (or renewed)
// under a CA that expires within the leaf lifetime is cut to end CACut
// before the CA (LeafNotAfter), and is then inside its renewal margin as
// soon as it is issued. Renewing it again gives no later expiry, so every
// renewal round would reissue it (a reload of every member each time) for
// as long as the CA is not rotated.
//
// Invariant (AtCALimit, the one rule for every leaf: the member and host
// leaves of pkg/certs' renewal and the operator's NAME-client-tls): a leaf
// that is due but already ends as late as its CA allows is not renewed;
// the renewal reports instead that the CA must be rotated (CALimitWarning).
// A leaf the CA could give a later expiry (the CA was rotated, or the leaf
// ends well before it) is renewed as usual.

// CACut is how long before its CA's expiry a leaf cut to it ends; it is
// also the tolerance of AtCALimit.
const CACut = time.Minute

// LeafNotAfter is when a leaf of lifetime issued at now by ca ends:
// now+lifetime, cut CACut before ca expires.
func LeafNotAfter(ca *x509.Certificate, lifetime time.Duration, now time.Time) time.Time {
	notAfter := now.Add(lifetime)
	if limit := ca.NotAfter.Add(-CACut); notAfter.After(limit) {
		notAfter = limit
	}
	return notAfter
}

// AtCALimit reports whether leaf c already ends as late as ca allows: a
// renewal by ca at now with lifetime would be cut at the CA's expiry
// (LeafNotAfter), and c ends there already (within CACut: a leaf cut at
// the CA's expiry itself, by older releases, counts too). Such a leaf is
// not renewed: only rotating the CA helps.
func AtCALimit(c, ca *x509.Certificate, lifetime time.Duration, now time.Time) bool {
	limit := ca.NotAfter.Add(-CACut)
	return now.Add(lifetime).After(limit) && !c.NotAfter.Before(limit.Add(-CACut))
}

// CALimitWarning is what a renewal reports instead of reissuing the due
// leaves names, which end as late as the CA ca allows (AtCALimit).
func CALimitWarning(ca *x509.Certificate, names []string) string {
	return fmt.Sprintf("the CA %q expires at %s: %v end with it and cannot be renewed to a later expiry, so they are not reissued; rotate the CA before it expires",
		ca.Subject.CommonName, ca.NotAfter.UTC().Format(time.RFC3339), names)
}

// CAHoldsRenewal reports whether a CA expiring at caNotAfter holds back
// the renewal of its leaves at now: a leaf it issues now is cut at its
// expiry (LeafNotAfter) and is then already within v's renewal margin, so
// renewing it can never again give a later expiry (AtCALimit). Only
// rotating the CA helps; the status says so (CertificatesReady).
func (v Validity) CAHoldsRenewal(caNotAfter, now time.Time) bool {
	return !caNotAfter.Add(-CACut).After(now.Add(v.WithDefaults().RenewBefore))
}
