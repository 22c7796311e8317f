package cluster

import "github.com/etcd-steward/steward/pkg/plan"

// PlanKinds is the registry of the plan kinds (plan.Registry), each
// registered by its own package as it initialises (pkg/upgrade,
// pkg/carotate, pkg/adopt); cmd/steward/internal/cli/plankinds.go links
// them all. `steward rollback` of a latest plan whose kind names no undo
// (or no plan at all) rolls back the last upgrade: a rollback plan.
var PlanKinds = plan.NewRegistry[*Cluster](plan.KindRollback)
