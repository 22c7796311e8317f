package certs

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// ErrCALimit: due leaves end as late as their CA allows (pki.AtCALimit):
// the renewal leaves them alone and reports this, once a round, until the
// CA is rotated (the command layer names how).
var ErrCALimit = errors.New("certificates cannot be renewed past their CA")

// CALimited returns, when some of the leaves names of the certificate
// directory dir are due under v at now but already end as late as the CA
// of dir allows (pki.AtCALimit: what a renewal leaves alone), an error
// wrapping ErrCALimit that names them and the CA (pki.CALimitWarning), or
// nil. Leaves that cannot be read are left to the renewal, which reports
// them.
func CALimited(dir string, v pki.Validity, names []string, now time.Time) error {
	v = v.WithDefaults()
	ca, err := pki.ParseCertFile(filepath.Join(dir, pki.CACert))
	if err != nil {
		return nil
	}
	ls, err := pki.FindLeaves(dir, names)
	if err != nil {
		return nil
	}
	var held []string
	for _, l := range ls {
		c, err := pki.ParseCertFile(l.Cert)
		if err != nil {
			continue
		}
		if v.Due(c, now) && pki.AtCALimit(c, ca, v.Leaf, now) {
			held = append(held, l.Name)
		}
	}
	if len(held) == 0 {
		return nil
	}
	return refusal.New(ErrCALimit, "%s", pki.CALimitWarning(ca, held))
}
