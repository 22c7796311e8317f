package certs

import (
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// RenewDir reissues leaves of the certificate directory dir with the CA there:
// the leaves named (server, peer, client, agent, clients/NAME), or every
// leaf when names is empty; only those at or past their renewal point
// unless force. A renewed certificate keeps its subject, names, usages and
// key, and gets a new serial and v.Leaf of lifetime; the key file is not
// touched, so the certificate file is the one file that changes, by one
// atomic rename, after the new certificate was checked against the key and
// the CA. The certificate it replaced stays beside it (PrevSuffix) until
// ForgetPrevious.
//
// Every leaf is checked before any is written: a file that does not parse,
// a key that does not match, a leaf the CA did not sign, a missing CA key
// (ErrNoCAKey) or an unknown name is refused and nothing is replaced; so
// is any renewal while a CA rotation runs (ErrRotationInProgress).
func RenewDir(dir string, v pki.Validity, names []string, force bool, now time.Time) ([]pki.Renewal, error) {
	v = v.WithDefaults()
	if err := v.Check(); err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil, fmt.Errorf("renew certificates: %w", err)
	}
	if pki.RotationInProgress(dir) {
		return nil, fmt.Errorf("renew certificates: %w", pki.ErrRotationInProgress)
	}
	sel, err := renewal(dir, "renew certificates", v, force, now)
	if err != nil {
		return nil, err
	}
	return sel.leaves(ls, now)
}
