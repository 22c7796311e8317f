package cluster

import (
	"errors"
	"fmt"

	"github.com/etcd-steward/steward/pkg/refusal"
)

// ErrExternal is the Kind of the refusal of work on member processes (start,
// stop, add, remove, upgrade, recover, certificates) of an attached
// cluster, whose members someone else runs.
var ErrExternal = errors.New("the cluster is attached: Steward does not run its members")

// RequireProcessControl refuses, for an attached cluster, an operation
// that needs to run or change member processes; what names it ("add a
// member", "upgrade"). It returns nil for a cluster Steward runs, which
// includes an attached cluster every member of which `steward adopt`
// handed to an agent.
func (c *Cluster) RequireProcessControl(what string) error {
	if !c.Spec.IsExternal() || c.Spec.AllAdopted() {
		return nil
	}
	return &refusal.Refusal{Kind: ErrExternal, Msg: "cannot " + what + ": cluster " + c.Spec.Name + " is attached, Steward does not run its members (it only reaches them through the etcd API)"}
}

// ErrOperatorCerts is the Kind of the refusal to issue, renew or rotate
// certificates of a cluster whose certificates are the operator's: an
// attached cluster, its members adopted or not (adopt keeps each member's
// own certificate files). ErrOperatorCertsAdopted is its kind when every
// member is adopted, so Steward could take the CA over (errors.Is
// ErrOperatorCerts holds for both).
var (
	ErrOperatorCerts        = errors.New("the cluster's certificates are the operator's")
	ErrOperatorCertsAdopted = fmt.Errorf("%w, every member adopted", ErrOperatorCerts)
)

// RequireOwnCerts refuses what (a renewal, a client certificate, a CA
// rotation) on a cluster whose members and clients use the operator's
// certificates: Steward holds no key of their CA, and a certificate it
// issued from its own would be trusted by none of them. It returns nil
// once Steward took over issuing them (the certificate take-over, package
// adopt): the cluster then runs on Steward's certificate directory. The
// command adds what the operator can do (cli.LibraryAdvice).
func (c *Cluster) RequireOwnCerts(what string) error {
	if !c.Spec.OperatorCerts() {
		return nil
	}
	kind := ErrOperatorCerts
	if c.Spec.AllAdopted() {
		kind = ErrOperatorCertsAdopted
	}
	return &refusal.Refusal{Kind: kind, Msg: "cannot " + what + ": the certificates of cluster " + c.Spec.Name +
		" are the operator's (it was attached): Steward does not hold their CA's key"}
}

// clientFiles are the CA, client certificate and key Steward dials etcd
// with: the operator's own for an attached cluster.
func (c *Cluster) clientFiles() (ca, cert, key string) { return c.Spec.ClientFiles(c.Dir) }
