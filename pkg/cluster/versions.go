package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/plan"
)

// RecordMemberVersion records in the spec that a member's data runs
// version (a per-member override while a plan is halfway).
func (c *Cluster) RecordMemberVersion(ctx context.Context, name, version string) error {
	m, err := c.Member(name)
	if err != nil || c.Spec.VersionOf(m) == version {
		return err
	}
	s := c.Spec.Clone()
	for i := range s.Members {
		if s.Members[i].Name == name {
			s.Members[i].Version = version
			if version == s.Version {
				s.Members[i].Version = ""
			}
		}
	}
	if err := c.SaveSpec(ctx, s); err != nil {
		return fmt.Errorf("record version %s for member %s: %w", version, name, err)
	}
	return nil
}

// SetVersion makes version the cluster's version in the spec and drops
// per-member overrides that equal it.
func (c *Cluster) SetVersion(ctx context.Context, version string) error {
	s := c.Spec.Clone()
	s.Version = version
	for i := range s.Members {
		if s.Members[i].Version == version {
			s.Members[i].Version = ""
		}
	}
	return c.SaveSpec(ctx, s)
}

// Plans returns the plan store of the Steward directory.
//
// On a multi-host cluster every save is also copied, signed, into the
// backup store (package handover), where another coordinator takes over
// (`steward takeover`); a save fails once another one did. The copy gets
// at most 30 s of the ctx given to Save.
func (c *Cluster) Plans() *plan.Store {
	st := plan.OpenStore(c.Dir)
	if c.Spec != nil && c.Spec.MultiHost() {
		st.Mirror = func(ctx context.Context, p *plan.Plan) error {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			h, err := c.Handover(ctx)
			if err != nil {
				return err
			}
			return h.SavePlan(ctx, p)
		}
	}
	return st
}

// Handover returns this coordinator's writer of copies into the backup
// store, signed with the admin key.
func (c *Cluster) Handover(ctx context.Context) (*handover.Coordinator, error) {
	store, err := c.BackupStore(ctx)
	if err != nil {
		return nil, err
	}
	signer, err := handover.NewSigner(c.CertDir())
	if err != nil {
		return nil, err
	}
	return &handover.Coordinator{Store: store, Signer: signer, Dir: c.Dir}, nil
}

// ForStep reopens the cluster from its directory for one step of plan p,
// keeping c's progress: a step must see what earlier steps saved in the
// spec (versions, adopted members), in this process or in one killed
// before it. It returns the plan's health timeout (HealthTimeoutSeconds,
// `--health-timeout` when it was made) when set, else timeout.
func (c *Cluster) ForStep(p *plan.Plan, timeout time.Duration) (*Cluster, time.Duration, error) {
	n, err := Open(c.Dir)
	if err != nil {
		return nil, timeout, err
	}
	n.Progress, n.Runtimes = c.Progress, c.Runtimes
	if p.HealthTimeoutSeconds > 0 {
		timeout = time.Duration(p.HealthTimeoutSeconds) * time.Second
	}
	return n, timeout, nil
}
