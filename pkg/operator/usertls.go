package operator

// spec.tls.caSecret: the user's own CA instead of one the operator makes
// (docs/operator.md, "The user's CA").
//
// The Secret's CA (certificate and ECDSA key) is checked before anything
// is written and installed as the CA of the cluster's Steward directory
// (pki/ca.crt, pki/ca.key) before bootstrap.Init, which then issues every
// leaf (members' server and peer certificates, the agents', the admin
// client's, NAME-client-tls) from it; the coordinator renews them from it
// as it does with its own CA.
//
// Invariants:
//   - a Secret without the certificate or the key, a certificate that is
//     not a CA allowed to sign certificates, a key that is not ECDSA or
//     not the certificate's, or a CA outside its validity is refused
//     (Ready False, reason CARefused, Event) before the Steward directory
//     holds a spec, and nothing is made;
//   - the CA key, once copied into the operator's state directory, is in
//     no Secret the operator makes (NAME-ca holds the certificate only);
//   - the CA never changes under a running cluster: the field cannot
//     change (the API's CEL rule), and a Secret whose certificate is no
//     longer the cluster's CA is refused (CARefused) with nothing changed,
//     because replacing the CA of running pods (a trust bundle handed to
//     every agent first, as `steward certs rotate-ca` does on hosts) is not
//     done for pods yet. A Secret deleted after the cluster was created is
//     not needed: the CA is in the operator's state.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/pki"
)

// ReasonCARefused is the Ready condition's reason (and the Event's) for a
// spec.tls.caSecret that is refused.
const ReasonCARefused = "CARefused"

// ErrCARefused refuses the CA of spec.tls.caSecret.
var ErrCARefused = errors.New("the CA of spec.tls.caSecret is refused")

// caKeys returns the keys of the CA certificate and its key in a Secret:
// tls.crt and tls.key (a kubernetes.io/tls Secret, cert-manager's CA
// Secrets), else ca.crt and ca.key.
func caKeys(data map[string][]byte) (certKey, keyKey string) {
	certKey, keyKey = "tls.crt", "tls.key"
	if len(data[certKey]) == 0 && len(data["ca.crt"]) > 0 {
		certKey = "ca.crt"
	}
	if len(data[keyKey]) == 0 && len(data["ca.key"]) > 0 {
		keyKey = "ca.key"
	}
	return certKey, keyKey
}

// CAFromSecret is the CA of the Secret name's data, checked at now: one
// CA certificate that may sign certificates, valid at now, with its ECDSA
// key. The errors name the Secret and its keys, never the key's content.
func CAFromSecret(name string, data map[string][]byte, now time.Time) (*pki.CA, error) {
	certKey, keyKey := caKeys(data)
	var missing []string
	if len(data[certKey]) == 0 {
		missing = append(missing, "tls.crt (or ca.crt): the CA certificate")
	}
	if len(data[keyKey]) == 0 {
		missing = append(missing, "tls.key (or ca.key): the CA's private key")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: Secret %s has no key %s; put the CA there, or leave spec.tls.caSecret empty for a CA of the operator's own", ErrCARefused, name, strings.Join(missing, " and no key "))
	}
	ca, err := pki.ParseCA(data[certKey], data[keyKey], "Secret "+name+" key "+certKey, "Secret "+name+" key "+keyKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCARefused, err)
	}
	c := ca.Cert
	if now.After(c.NotAfter) {
		return nil, fmt.Errorf("%w: the CA in Secret %s (%s) expired at %s: certificates it issues would not verify; put a valid CA in the Secret", ErrCARefused, name, c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(c.NotBefore) {
		return nil, fmt.Errorf("%w: the CA in Secret %s (%s) is not valid before %s: certificates it issues would not verify yet; put a valid CA in the Secret", ErrCARefused, name, c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339))
	}
	return ca, nil
}

// userCA reads spec.tls.caSecret. For a cluster not made yet (fresh) it
// returns the checked CA to install; for one that exists it checks that
// the Secret, if still there, holds the cluster's CA, and returns nil.
func (r *Reconciler) userCA(ctx context.Context, ec *v1alpha1.EtcdCluster, dir string, fresh bool) (*pki.CA, error) {
	name := ec.Spec.TLS.CASecret
	var sec corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &sec)
	switch {
	case apierrors.IsNotFound(err) && !fresh:
		return nil, nil // not needed any more: the CA is in the state directory
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: spec.tls.caSecret: there is no Secret %s in the cluster's namespace: create it with the CA's tls.crt and tls.key", ErrCARefused, name)
	case err != nil:
		return nil, fmt.Errorf("spec.tls.caSecret %s: %w", name, err)
	}
	if fresh {
		return CAFromSecret(name, sec.Data, time.Now())
	}
	cur, err := os.ReadFile(filepath.Join(dir, "pki", pki.CACert))
	if err != nil {
		return nil, err
	}
	certKey, _ := caKeys(sec.Data)
	if !sameCertificate(sec.Data[certKey], cur) {
		return nil, fmt.Errorf("%w: Secret %s no longer holds the CA the cluster was created with: replacing the CA of running member pods is not done yet, so nothing was changed; put the previous CA back into the Secret (the cluster keeps issuing from its copy), or move the cluster into a new EtcdCluster through its backups", ErrCARefused, name)
	}
	return nil, nil
}

// installCA makes ca the CA of the Steward directory dir (before
// bootstrap.Init, which keeps a CA it finds), with the cluster backup key
// born beside it as it is with a CA of Steward's own (a restore's source
// key, written before, is kept).
func installCA(dir string, ca *pki.CA) error {
	pkiDir := filepath.Join(dir, "pki")
	if err := pki.WriteCA(pkiDir, ca); err != nil {
		return fmt.Errorf("install the CA of spec.tls.caSecret: %w", err)
	}
	if _, err := pki.EnsureBackupAuthKey(pkiDir); err != nil {
		return fmt.Errorf("install the CA of spec.tls.caSecret: %w", err)
	}
	return nil
}

// sameCertificate reports whether the first certificates of two PEM
// texts are the same.
func sameCertificate(a, b []byte) bool {
	first := func(p []byte) []byte {
		for {
			var blk *pem.Block
			if blk, p = pem.Decode(p); blk == nil {
				return nil
			}
			if blk.Type == "CERTIFICATE" {
				return blk.Bytes
			}
		}
	}
	fa, fb := first(a), first(b)
	return fa != nil && bytes.Equal(fa, fb)
}

// CAExpiryWarning says (non-empty) when the CA expires within the leaves'
// renewal margin (a third of their lifetime, pki's defaults:
// pki.Validity.CAHoldsRenewal): leaves are cut at the CA's expiry, so each
// one is due for renewal as soon as it is issued and can no longer be
// renewed to a later expiry (pki.AtCALimit: the renewal leaves it alone and
// says so) until the CA is replaced, which is not done for pods yet.
func CAExpiryWarning(ca *x509.Certificate, now time.Time) string {
	v := pki.Validity{}.WithDefaults()
	if v.CAHoldsRenewal(ca.NotAfter, now) {
		return fmt.Sprintf("the CA %s expires at %s, within the certificates' renewal margin of %s: every certificate it issues ends then and cannot be renewed past it; the cluster stops working when the CA expires, and replacing the CA of running pods is not done yet", ca.Subject.CommonName, ca.NotAfter.UTC().Format(time.RFC3339), v.RenewBefore)
	}
	return ""
}
