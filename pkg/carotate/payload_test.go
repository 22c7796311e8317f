package carotate

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestPayloadOldCA: a rotation records the CA it replaces (the SHA-256 of
// ca.crt's certificate), its rollback the same CA, the one it goes back
// to; plan show names it. Without a readable ca.crt the rotation records
// none (its prepare step says why) and is shown by kind and state.
func TestPayloadOldCA(t *testing.T) {
	dir := t.TempDir()
	s, err := spec.NewDefault(spec.DefaultOptions{Members: 3, Version: "3.6.0", StewardDir: dir, FreePort: spec.FreePort("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s}
	bare, err := NewPlan(c, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := PayloadOf(bare); err != nil || v.OldCA != "" || show(bare) != "ca-rotation, pending" {
		t.Errorf("without a CA: payload %+v (%v), shown %q", v, err, show(bare))
	}
	if err := pki.Ensure(c.CertDir(), s.Name, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCertFile(filepath.Join(c.CertDir(), pki.CACert))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca.Raw)
	want := hex.EncodeToString(sum[:])
	p, err := NewPlan(c, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := PayloadOf(p); err != nil || v.OldCA != want {
		t.Fatalf("payload %+v (%v), want the CA %s", v, err, want)
	}
	if got := show(p); got != "ca-rotation of the CA sha256:"+want[:16]+", pending" {
		t.Errorf("show = %q", got)
	}
	p.State = plan.Aborted
	rb, err := NewRollbackPlan(c, p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := PayloadOf(rb); err != nil || v.OldCA != want {
		t.Errorf("the rollback's payload %+v (%v), want the CA %s", v, err, want)
	}
	if got := show(rb); got != "ca-rotation-rollback back to the CA sha256:"+want[:16]+", pending" {
		t.Errorf("show = %q", got)
	}
}
