package carotate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
)

// Payload is what a CA rotation and its rollback record about themselves
// (plan.Plan's Payload): the CA the rotation replaces, which its rollback
// goes back to. A plan written before payloads existed records none.
type Payload struct {
	// OldCA is the SHA-256 of the old CA certificate (DER, hex), read
	// from ca.crt when the rotation is planned; empty when it could not
	// be read then (the prepare step, which loads it, says why).
	OldCA string `json:"oldCA,omitempty"`
}

// PayloadOf returns the payload of CA rotation (or rollback) p.
func PayloadOf(p *plan.Plan) (Payload, error) { return plan.PayloadOf[Payload](p) }

// currentCA is the SHA-256 of the first certificate of c's ca.crt, "" when
// it cannot be read.
func currentCA(c *cluster.Cluster) string {
	cert, err := pki.ParseCertFile(filepath.Join(c.CertDir(), pki.CACert))
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// show is the summary `plan show` prints of a CA rotation or its
// rollback: "ca-rotation of the CA sha256:PREFIX, STATE" ("ca-rotation-
// rollback to the CA ..."), the kind and state alone without a payload.
func show(p *plan.Plan) string {
	v, err := PayloadOf(p)
	switch {
	case err != nil:
		return fmt.Sprintf("%s, %s (%v)", p.Kind, p.State, err)
	case v.OldCA == "":
		return plan.ShowState(p)
	}
	how := "of"
	if p.Kind == plan.KindCARotationRollback {
		how = "back to"
	}
	return fmt.Sprintf("%s %s the CA sha256:%.16s, %s", p.Kind, how, v.OldCA, p.State)
}
