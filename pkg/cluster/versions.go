package cluster

import (
	"fmt"

	"github.com/etcd-steward/steward/pkg/plan"
)

// RecordMemberVersion records in the spec that a member's data runs
// version (a per-member override while a plan is halfway).
func (c *Cluster) RecordMemberVersion(name, version string) error {
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
	if err := c.SaveSpec(s); err != nil {
		return fmt.Errorf("record version %s for member %s: %w", version, name, err)
	}
	return nil
}

// SetVersion makes version the cluster's version in the spec and drops
// per-member overrides that equal it.
func (c *Cluster) SetVersion(version string) error {
	s := c.Spec.Clone()
	s.Version = version
	for i := range s.Members {
		if s.Members[i].Version == version {
			s.Members[i].Version = ""
		}
	}
	return c.SaveSpec(s)
}

// Plans returns the plan store of the Steward directory.
func (c *Cluster) Plans() *plan.Store { return plan.OpenStore(c.Dir) }
