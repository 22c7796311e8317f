package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/pki"
)

// ErrNoHostCerts: the agent did not join a cluster as a host, so it has
// no host certificates to hand out or replace (the command names the
// renewal to run on the coordinator: cli.LibraryAdvice).
var ErrNoHostCerts = errors.New("this agent holds no host certificates (it runs on the coordinator's machine, whose directory renews its own: renew there)")

// HostCert returns the host's current certificate name (pki.HostLeafNames)
// so the coordinator can reissue it with the same key.
func (a *Agent) HostCert(name string) (agentapi.CertFile, error) {
	if a.opts.CertDir == "" {
		return agentapi.CertFile{}, badRequest{ErrNoHostCerts}
	}
	p, err := pki.HostLeafPath(a.opts.CertDir, name)
	if err != nil {
		return agentapi.CertFile{}, badRequest{err}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return agentapi.CertFile{}, fmt.Errorf("host certificate %s: %w", name, err)
	}
	return agentapi.CertFile{Name: name, PEM: string(b)}, nil
}

// InstallHostCert installs a renewal of the host's certificate name that
// the coordinator signed (pki.Install: same key, same subject, signed by
// the cluster CA, valid now; the previous certificate kept beside it).
// Every refusal is a bad request and replaces nothing.
func (a *Agent) InstallHostCert(name string, certPEM []byte) (agentapi.CertRenewal, error) {
	if a.opts.CertDir == "" {
		return agentapi.CertRenewal{}, badRequest{ErrNoHostCerts}
	}
	a.certMu.Lock()
	defer a.certMu.Unlock()
	r, err := pki.Install(a.opts.CertDir, name, certPEM, time.Now())
	if err != nil {
		a.log.Warn("renewed certificate refused", "name", name, "err", err)
		for _, kind := range []error{pki.ErrUnknownCert, pki.ErrUnparsable, pki.ErrKeyMismatch, pki.ErrNotSameLeaf, pki.ErrNotSignedByCA, pki.ErrNotValidNow} {
			if errors.Is(err, kind) {
				return agentapi.CertRenewal{}, badRequest{err}
			}
		}
		return agentapi.CertRenewal{}, err
	}
	a.log.Info("certificate renewed by the coordinator", "name", r.Name, "file", r.File, "oldSerial", r.OldSerial, "newSerial", r.NewSerial, "notAfter", r.NotAfter)
	return agentapi.CertRenewal{Name: r.Name, File: r.File, OldSerial: r.OldSerial, NewSerial: r.NewSerial, NotAfter: r.NotAfter}, nil
}

// ForgetPreviousHostCert removes the copy of the certificate a renewal
// replaced, once the coordinator saw the new one served.
func (a *Agent) ForgetPreviousHostCert(name string) error {
	if a.opts.CertDir == "" {
		return badRequest{ErrNoHostCerts}
	}
	p, err := pki.HostLeafPath(a.opts.CertDir, name)
	if err != nil {
		return badRequest{err}
	}
	a.certMu.Lock()
	defer a.certMu.Unlock()
	return pki.ForgetPrevious(pki.Renewal{Name: name, File: p})
}

// InstallTrustBundle installs the coordinator's trust bundle as the host's
// ca.crt during a CA rotation (pki.InstallTrustBundle: CA certificates
// only, every host leaf and the caller's certificate signed by one of
// them; one atomic rename). The agent's API reads ca.crt at each
// handshake; the host's members read it when they start (the rotation
// restarts them). Every refusal is a bad request and replaces nothing.
func (a *Agent) InstallTrustBundle(bundle []byte, caller *x509.Certificate) (agentapi.TrustBundle, error) {
	if a.opts.CertDir == "" {
		return agentapi.TrustBundle{}, badRequest{ErrNoHostCerts}
	}
	a.certMu.Lock()
	defer a.certMu.Unlock()
	r, err := pki.InstallTrustBundle(a.opts.CertDir, bundle, caller, time.Now())
	if err != nil {
		a.log.Warn("trust bundle refused", "err", err)
		if errors.Is(err, pki.ErrBadTrustBundle) {
			return agentapi.TrustBundle{}, badRequest{err}
		}
		return agentapi.TrustBundle{}, err
	}
	if r.Changed {
		a.log.Info("trust bundle installed by the coordinator", "file", r.File, "cas", r.CAs)
	}
	return agentapi.TrustBundle{File: r.File, Changed: r.Changed, CAs: r.CAs}, nil
}
